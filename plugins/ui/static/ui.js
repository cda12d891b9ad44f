// Reloads the page every data-refresh-ms (on <body>) unless paused with
// #refresh-toggle (the choice is kept in localStorage), and not while the
// user is filling in a form (a field has the focus or holds typed text):
// a reload would wipe it. Nothing else.
(function () {
  var ms = parseInt(document.body.getAttribute("data-refresh-ms"), 10);
  var btn = document.getElementById("refresh-toggle");
  var key = "mmmq-ui-refresh-paused";
  var paused = function () { return localStorage.getItem(key) === "1"; };
  var typing = function () {
    var a = document.activeElement;
    if (a && (a.tagName === "INPUT" || a.tagName === "TEXTAREA" || a.tagName === "SELECT")) { return true; }
    var fields = document.querySelectorAll("input:not([type=hidden])");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].value !== fields[i].defaultValue) { return true; }
    }
    return false;
  };
  var timer = null;
  function tick() {
    if (typing()) { timer = setTimeout(tick, ms); return; }
    location.reload();
  }
  function arm() {
    if (timer) { clearTimeout(timer); timer = null; }
    if (btn) { btn.textContent = paused() ? "Resume refresh" : "Pause refresh"; }
    if (ms > 0 && !paused()) { timer = setTimeout(tick, ms); }
  }
  if (btn) {
    btn.addEventListener("click", function () {
      if (paused()) { localStorage.removeItem(key); } else { localStorage.setItem(key, "1"); }
      arm();
    });
  }
  arm();
})();
