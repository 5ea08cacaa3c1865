// idem dashboard: live refresh and countdowns. Served by the binary; no build step.
// Every few seconds the element #live is fetched again as a fragment (the server answers
// the request header x-idem-fragment with that part of the page only) and swapped in;
// lease countdowns tick every second in between. Paused while the tab is hidden.
"use strict";

(function () {
  function tickCountdowns() {
    document.querySelectorAll(".countdown[data-ms]").forEach(function (el) {
      var ms = parseInt(el.getAttribute("data-ms"), 10) - 1000;
      el.setAttribute("data-ms", String(ms));
      el.textContent = ms > 0 ? human(ms) : "expired";
      el.classList.toggle("expired", ms <= 0);
    });
  }

  function human(ms) {
    if (ms < 60000) return Math.ceil(ms / 1000) + " s";
    if (ms < 3600000) return Math.floor(ms / 60000) + " min " + Math.floor((ms / 1000) % 60) + " s";
    return Math.floor(ms / 3600000) + " h " + Math.floor((ms / 60000) % 60) + " min";
  }

  function refresh(live) {
    if (document.hidden) return;
    fetch(window.location.href, {
      headers: { "x-idem-fragment": "1" },
      credentials: "same-origin",
      cache: "no-store",
      redirect: "follow",
    })
      .then(function (response) {
        if (response.redirected || response.status === 401) {
          window.location.reload(); // the session ended: show the login page
          return null;
        }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html === null) return;
        live.innerHTML = html; // the server's own escaped HTML; the CSP forbids inline script
        live.setAttribute("data-refreshed", new Date().toISOString());
      })
      .catch(function () {
        live.setAttribute("data-refresh-failed", new Date().toISOString());
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var live = document.getElementById("live");
    if (live) {
      var every = parseInt(live.getAttribute("data-refresh-ms"), 10) || 5000;
      window.setInterval(function () { refresh(live); }, every);
    }
    window.setInterval(tickCountdowns, 1000);
  });
})();
