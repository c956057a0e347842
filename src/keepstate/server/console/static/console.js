// keepstate console: live run statuses, the only script of the console.
// Every element with data-run-id and data-status shows a run's status. While some of them show a
// status a run can still leave, this asks the console for those runs' statuses every POLL_MS and
// writes the new ones in place (textContent only: never markup). A page whose body says
// data-live="reload" (a run's own page, where much more changes with the status) reloads instead.
// Without this script every page still works: a reload shows the same thing.
"use strict";

(function () {
  const POLL_MS = 1500;
  const FINAL = new Set(["done", "failed", "interrupted", "cancelled", "expired"]);
  const STATUS_URL = "/console/runs/status";

  function watched() {
    return Array.from(document.querySelectorAll("[data-run-id][data-status]"))
      .filter((cell) => !FINAL.has(cell.dataset.status));
  }

  function show(cell, status) {
    cell.dataset.status = status;
    cell.textContent = status;
  }

  async function poll() {
    const cells = watched();
    if (cells.length === 0) {
      return false;
    }
    const ids = Array.from(new Set(cells.map((cell) => cell.dataset.runId)));
    const answer = await fetch(STATUS_URL + "?ids=" + encodeURIComponent(ids.join(",")), {
      credentials: "same-origin",
      headers: { "Accept": "application/json" },
      cache: "no-store",
    });
    if (answer.status === 401) {
      return false;
    }
    if (!answer.ok) {
      return true;
    }
    const runs = (await answer.json()).runs || {};
    for (const cell of cells) {
      const found = runs[cell.dataset.runId];
      if (found && typeof found.status === "string" && found.status !== cell.dataset.status) {
        if (document.body.dataset.live === "reload") {
          window.location.reload();
          return false;
        }
        show(cell, found.status);
      }
    }
    return true;
  }

  function schedule() {
    window.setTimeout(async () => {
      let again = true;
      try {
        again = await poll();
      } catch (error) {
        again = true; // the server restarting, a network blip: try again later
      }
      if (again) {
        schedule();
      }
    }, POLL_MS);
  }

  document.addEventListener("DOMContentLoaded", schedule);
})();
