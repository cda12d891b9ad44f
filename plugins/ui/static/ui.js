// Reloads the page every data-refresh-ms (on <body>) unless paused with
// #refresh-toggle; the choice is kept in localStorage. Nothing else.
(function () {
  var ms = parseInt(document.body.getAttribute("data-refresh-ms"), 10);
  var btn = document.getElementById("refresh-toggle");
  var key = "mmmq-ui-refresh-paused";
  var paused = function () { return localStorage.getItem(key) === "1"; };
  var timer = null;
  function arm() {
    if (timer) { clearTimeout(timer); timer = null; }
    if (btn) { btn.textContent = paused() ? "Resume refresh" : "Pause refresh"; }
    if (ms > 0 && !paused()) { timer = setTimeout(function () { location.reload(); }, ms); }
  }
  if (btn) {
    btn.addEventListener("click", function () {
      if (paused()) { localStorage.removeItem(key); } else { localStorage.setItem(key, "1"); }
      arm();
    });
  }
  arm();
})();
