// Live refresh for the sluice dashboard. A page whose <main> has a
// data-refresh attribute (seconds) is fetched again that often and its
// <main> swapped for the new one. Nothing else is done with JavaScript:
// every page works without it. The refresh waits while the tab is hidden,
// while a field of the page has the focus, and while text is selected, so
// that nothing changes under the reader's hands. A fresh page without
// data-refresh (a run that has ended) is swapped in once more, and the
// refresh stops there: nothing on it changes any more.
(function () {
  "use strict";
  var main = document.querySelector("main[data-refresh]");
  var status = document.getElementById("live");
  if (!main || !window.fetch || !window.DOMParser) {
    return;
  }
  var every = parseInt(main.getAttribute("data-refresh"), 10) * 1000;
  if (!(every >= 1000)) {
    return;
  }
  var busy = false;
  var last = stamp();

  function show(text, stale) {
    if (!status) {
      return;
    }
    status.textContent = text;
    status.className = stale ? "live stale" : "live";
  }

  function stamp() {
    var d = new Date();
    function two(n) { return (n < 10 ? "0" : "") + n; }
    return two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds());
  }

  function held() {
    if (document.hidden) {
      return true;
    }
    var a = document.activeElement;
    if (a && a !== document.body && main.contains(a) && /^(INPUT|SELECT|TEXTAREA|BUTTON|SUMMARY)$/.test(a.tagName)) {
      return true;
    }
    var sel = window.getSelection ? window.getSelection() : null;
    return !!(sel && !sel.isCollapsed && main.contains(sel.anchorNode));
  }

  function refresh() {
    if (busy || held()) {
      return;
    }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" } })
      .then(function (r) {
        // A sign-in page or an error page is not this page: keep what is shown.
        if (!r.ok || r.redirected) {
          throw new Error("status " + r.status);
        }
        return r.text();
      })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelector("main");
        if (!fresh) {
          throw new Error("no content");
        }
        var final = !fresh.hasAttribute("data-refresh");
        // Details the reader opened or closed stay so.
        var was = [];
        main.querySelectorAll("details").forEach(function (d) { was.push(d.open); });
        var now = fresh.querySelectorAll("details");
        if (now.length === was.length) {
          now.forEach(function (d, i) { d.open = was[i]; });
        }
        main.replaceWith(fresh);
        main = fresh;
        last = stamp();
        if (final) {
          window.clearInterval(timer);
          show("updated " + last + " · final", false);
          return;
        }
        show("live · updated " + last, false);
      })
      .catch(function () {
        show("live · not updated since " + last, true);
      })
      .then(function () {
        busy = false;
      });
  }

  show("live", false);
  var timer = window.setInterval(refresh, every);
})();
