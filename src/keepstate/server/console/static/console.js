// keepstate console: live pages, the only script of the console. Without it every page still
// works: a reload shows the same thing.
//
// Every POLL_MS it asks the console for the statuses of the runs the page shows (elements with
// data-run-id and data-status whose status a run can still leave) and for the count of runs waiting
// for this person, and writes the new ones in place (textContent only: never markup). A page whose
// body says data-live="reload" (a run's own page, where much more changes with a status) reloads.
//
// A page with [data-refresh] regions (the newest runs, the runs waiting for a person) also reads
// itself again and merges each region's children by their data-key: new ones come in at their
// place, gone ones leave, changed ones are replaced, and the one holding the focus (a note being
// typed) is left alone. The children come from the console's own page, escaped by its templates.
"use strict";

(function () {
  const POLL_MS = 1500;
  const FINAL = new Set(["done", "failed", "interrupted", "cancelled", "expired"]);
  const STATUS_URL = "/console/runs/status";

  function watched() {
    return Array.from(document.querySelectorAll("[data-run-id][data-status]"))
      .filter((cell) => !FINAL.has(cell.dataset.status));
  }

  function showCount(count) {
    for (const badge of document.querySelectorAll("[data-waiting]")) {
      if (badge.dataset.waiting !== count) {
        badge.dataset.waiting = count;
        badge.lastChild.textContent = count;
      }
    }
  }

  async function ask(url) {
    return fetch(url, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "application/json" } });
  }

  // statuses and the waiting count; false when the browser was signed out (stop polling)
  async function pollStatuses() {
    const cells = watched();
    const ids = Array.from(new Set(cells.map((cell) => cell.dataset.runId)));
    const answer = await ask(STATUS_URL + "?ids=" + encodeURIComponent(ids.join(",")));
    if (answer.status === 401) {
      return false;
    }
    if (!answer.ok) {
      return true;
    }
    const found = await answer.json();
    if (typeof found.waiting === "string") {
      showCount(found.waiting);
    }
    const runs = found.runs || {};
    for (const cell of cells) {
      const run = runs[cell.dataset.runId];
      if (run && typeof run.status === "string" && run.status !== cell.dataset.status) {
        if (document.body.dataset.live === "reload") {
          window.location.reload();
          return false;
        }
        cell.dataset.status = run.status;
        cell.textContent = run.status;
      }
    }
    return true;
  }

  function merge(region, fresh) {
    const kept = new Map();
    for (const child of Array.from(region.children)) {
      kept.set(child.dataset.key, child);
    }
    let previous = null;
    for (const incoming of Array.from(fresh.children)) {
      const old = kept.get(incoming.dataset.key);
      kept.delete(incoming.dataset.key);
      let node = old;
      if (!old || (old.outerHTML !== incoming.outerHTML && !old.contains(document.activeElement))) {
        node = document.importNode(incoming, true);
        if (old) {
          old.replaceWith(node);
        }
      }
      const place = previous ? previous.nextElementSibling : region.firstElementChild;
      if (place !== node) {
        region.insertBefore(node, place);
      }
      previous = node;
    }
    for (const gone of kept.values()) {
      if (!gone.contains(document.activeElement)) {
        gone.remove();
      }
    }
  }

  async function pollRegions() {
    const regions = Array.from(document.querySelectorAll("[data-refresh][id]"));
    if (regions.length === 0) {
      return true;
    }
    const answer = await fetch(window.location.href, { credentials: "same-origin", cache: "no-store" });
    if (answer.redirected || answer.status === 401) {
      return false;
    }
    if (!answer.ok) {
      return true;
    }
    const page = new DOMParser().parseFromString(await answer.text(), "text/html");
    for (const region of regions) {
      const fresh = page.getElementById(region.id);
      if (fresh) {
        merge(region, fresh);
      }
    }
    return true;
  }

  function schedule() {
    window.setTimeout(async () => {
      let again = true;
      try {
        again = (await pollStatuses()) && (await pollRegions());
      } catch (error) {
        again = true; // the server restarting, a network blip: try again later
      }
      if (again) {
        schedule();
      }
    }, POLL_MS);
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (document.querySelector("[data-waiting]")) {
      schedule();
    }
  });
})();
