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
//
// A run's page (data-live="follow") follows the run's events: an EventSource on the console's own
// stream of the run (the tbody's data-events: Server-Sent Events, signed in by the console's cookie,
// since an EventSource cannot send an Authorization header). Each event comes in as a row, in seq
// order, built with textContent. After a dropped connection the EventSource reconnects by itself
// and sends the last id it saw (Last-Event-ID), so the stream resumes right after it; a row at or
// before the last one shown is never added twice all the same. A run.status event writes the run's
// new status in place and reads the page's [data-follow] regions again (its facts, the decision
// form, the output), as a status change seen by the poll does: never a reload.
"use strict";

(function () {
  const POLL_MS = 1500;
  const FINAL = new Set(["done", "failed", "interrupted", "cancelled", "expired"]);
  const STATUS_URL = "/console/runs/status";
  const EVENT_ROWS = 1000; // rows a followed run's table keeps: the oldest go past it

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
        showStatus(cell.dataset.runId, run.status);
      }
    }
    return true;
  }

  // a run's new status in every cell showing it; on a followed run's page, its regions read again
  function showStatus(runId, status) {
    let changed = false;
    for (const cell of document.querySelectorAll("[data-run-id][data-status]")) {
      if (cell.dataset.runId === runId && cell.dataset.status !== status) {
        cell.dataset.status = status;
        cell.textContent = status;
        changed = true;
      }
    }
    if (changed && document.body.dataset.live === "follow") {
      refreshRegions("[data-follow][id]").catch(() => undefined);
    }
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

  function pollRegions() {
    return refreshRegions("[data-refresh][id]");
  }

  async function refreshRegions(selector) {
    const regions = Array.from(document.querySelectorAll(selector));
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

  function when(ms) {
    return new Date(ms).toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  function cell(row, tag, text) {
    const td = row.insertCell();
    const inner = td.appendChild(document.createElement(tag));
    inner.textContent = text;
    return inner;
  }

  // one event as the page's own rows are: #, type, data as indented JSON, time
  function eventRow(event) {
    const row = document.createElement("tr");
    row.dataset.seq = String(event.seq);
    row.insertCell().textContent = String(event.seq);
    cell(row, "code", event.type);
    cell(row, "pre", JSON.stringify(event.data, null, 2)).className = "json";
    const time = cell(row, "time", when(event.at));
    time.dateTime = new Date(event.at).toISOString();
    return row;
  }

  function followEvents() {
    const rows = document.getElementById("run-events");
    if (!rows || !rows.dataset.events || typeof window.EventSource !== "function") {
      return;
    }
    let last = Number(rows.dataset.after) || 0;
    const runId = rows.dataset.run;
    const source = new window.EventSource(rows.dataset.events);
    source.addEventListener("message", (message) => {
      let event;
      try {
        event = JSON.parse(message.data);
      } catch (error) {
        return;
      }
      if (typeof event.seq !== "number" || event.seq <= last) {
        return; // already shown: never twice
      }
      last = event.seq;
      rows.dataset.after = String(last);
      rows.appendChild(eventRow(event));
      while (rows.children.length > EVENT_ROWS) {
        rows.firstElementChild.remove();
      }
      for (const empty of document.querySelectorAll("[data-no-events]")) {
        empty.hidden = true;
      }
      const status = event.data && event.data.status;
      if (event.type === "run.status" && typeof status === "string") {
        showStatus(runId, status);
        if (FINAL.has(status)) {
          source.close(); // the stream ends with the run
        }
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (document.querySelector("[data-waiting]")) {
      schedule();
    }
    followEvents();
  });
})();
