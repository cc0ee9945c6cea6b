// fleetui: live updates (the page polls itself and swaps in its new
// content), confirmations for the forms that change state, and the stream
// tail over Server-Sent Events. Every text from the server is set with
// textContent or arrives escaped by html/template.
(function () {
  "use strict";
  var dlg = document.getElementById("confirm");
  var status = document.getElementById("status");
  var pending = null;

  document.addEventListener("submit", function (e) {
    var f = e.target;
    if (!f.dataset || !f.dataset.confirm || !dlg) return;
    e.preventDefault();
    pending = f;
    document.getElementById("confirm-text").textContent = f.dataset.confirm;
    dlg.showModal();
  });
  if (dlg) {
    document.getElementById("confirm-yes").addEventListener("click", function () {
      var f = pending;
      pending = null;
      dlg.close();
      if (f) f.submit(); // submit() fires no submit event: no second dialog
    });
    document.getElementById("confirm-no").addEventListener("click", function () {
      pending = null;
      dlg.close();
    });
  }

  var refresh = parseInt(document.body.dataset.refresh, 10) || 0;
  if (refresh > 0) {
    var poll = function () {
      if (dlg && dlg.open) { setTimeout(poll, refresh); return; }
      fetch(location.href, { credentials: "same-origin", cache: "no-store" })
        .then(function (res) {
          if (!res.ok) throw new Error("HTTP " + res.status);
          return res.text();
        })
        .then(function (html) {
          var next = new DOMParser().parseFromString(html, "text/html").getElementById("live");
          var cur = document.getElementById("live");
          // A selection in progress (a checked box) is not swapped away.
          var busy = cur && cur.querySelector("input[type=checkbox]:checked");
          if (next && cur && !busy && !(dlg && dlg.open) && cur.innerHTML !== next.innerHTML) {
            cur.replaceWith(document.importNode(next, true));
          }
          status.textContent = "live · " + new Date().toLocaleTimeString();
        })
        .catch(function (err) { status.textContent = "not updating: " + err.message; })
        .then(function () { setTimeout(poll, refresh); });
    };
    setTimeout(poll, refresh);
  }

  var tail = document.getElementById("tail");
  if (tail && window.EventSource) {
    var seen = new Set();
    var tstatus = document.getElementById("tail-status");
    var es = new EventSource(tail.dataset.src);
    es.addEventListener("open", function () { tstatus.textContent = "live"; status.textContent = "live tail"; });
    es.addEventListener("error", function () { tstatus.textContent = "reconnecting…"; });
    es.addEventListener("failure", function (ev) { tstatus.textContent = "failed: " + JSON.parse(ev.data); });
    es.addEventListener("entry", function (ev) {
      var e = JSON.parse(ev.data);
      // A bare member has no id, and the same data may be pushed again
      // (a sorted set's member then takes the newer score): tell its
      // pushes apart by the event id, the time to the millisecond, as
      // the server does; e.time is only to the second.
      var key = e.id || (ev.lastEventId + " " + e.data);
      if (seen.has(key)) return;
      seen.add(key);
      var li = document.createElement("li");
      var t = document.createElement("time");
      t.textContent = e.time + (e.id ? " · " + e.id : "");
      var pre = document.createElement("pre");
      pre.textContent = e.data;
      li.append(t, pre);
      tail.prepend(li);
      while (tail.children.length > 500) tail.lastElementChild.remove();
    });
  }
})();
