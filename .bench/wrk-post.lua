-- .bench/wrk-post.lua — wrk script of .bench/run.sh: POSTs the file named
-- by $WRK_BODY_FILE (the same JSON message mmmq bench sends) to the URL
-- given to wrk, and at the end prints one JSON line: complete responses,
-- the error counts and the latency quantiles in microseconds. A response
-- that is not 2xx counts in "status" (wrk's own count).
local f = assert(io.open(assert(os.getenv("WRK_BODY_FILE"), "WRK_BODY_FILE not set"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
	local e = summary.errors
	io.write(string.format(
		'{"wrk":true,"responses":%d,"durationUs":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,' ..
		'"p50Us":%d,"p99Us":%d,"p999Us":%d,"maxUs":%d}\n',
		summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
		latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max))
end
