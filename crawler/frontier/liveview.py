"""``scrapy frontier SPIDER --serve PORT``: a shared crawl's progress over time, in a browser.

One process reads the crawl every interval with :func:`~bloom_frontier.frontier.status.
read_status` (the reading ``--watch`` and ``--json`` show) plus the top hosts by queue
(:func:`read_hosts`), keeps the last :data:`HISTORY_SAMPLES` readings in memory
(:class:`LiveView`) and serves, with the standard library's HTTP server:

- ``/``: one HTML page, nothing external (inline CSS, script and SVG, held to that by its
  Content-Security-Policy), that fetches ``/status.json`` every interval and draws the
  figures, charts of pages per minute, queue, leases and failures, and per worker and per
  host tables;
- ``/status.json``: exactly what ``--json`` prints, plus ``live``: the history (oldest
  first; ``?since=T`` gives only the readings after clock ``T``), the top hosts, the figures
  in the status' own units and the last read error (None while Redis answers).

Bound to a loopback address (the default), the server answers only requests naming a
loopback host, so a web page cannot read it through DNS rebinding. Redis going away keeps
the server up: the page shows the error and the last reading until Redis answers again.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import ipaddress
import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import parse_qs, urlsplit

import redis

from bloom_frontier.frontier.redis.layout import FrontierKeys
from bloom_frontier.frontier.redis.partitions import partition_keys
from bloom_frontier.frontier.status import (
    FrontierStatus,
    human_bytes,
    human_duration,
    human_percent,
)
from bloom_frontier.redis_client import text

if TYPE_CHECKING:
    from bloom_frontier.redis_client import Client

#: Readings kept for the charts: an hour at the default interval of 2 s.
HISTORY_SAMPLES = 1800
#: Hosts the page lists, the most queued first.
TOP_HOSTS = 10
#: Lanes read per partition for the hosts' queues (best ranked first): a bound on the work
#: of one reading whatever the number of hosts; past it the host list says it is partial.
LANE_SCAN = 10_000


class ServeFailed(Exception):
    """The view cannot be served (its address); the message is the line the user reads."""


@dataclass(frozen=True)
class HostRow:
    """One politeness host of the crawl now."""

    host: str
    #: Requests in the host's lanes (those scanned).
    queued: int
    #: Downloads in flight now (``host_busy``).
    in_flight: int
    #: Seconds it is still paused for by a 429/503 backoff (0: not paused).
    paused_for: float


@dataclass(frozen=True)
class HostsReading:
    """The top hosts by queue, and how much of the queue they were read from."""

    top: list[HostRow] = field(default_factory=list)
    #: Hosts with requests queued or in flight (among the lanes scanned).
    hosts: int = 0
    #: Lanes (one per host and priority level) listed in the queue, and those read.
    lanes: int = 0
    lanes_scanned: int = 0

    @property
    def partial(self) -> bool:
        return self.lanes_scanned < self.lanes


def read_hosts(
    client: Client, prefix: str, clock: float, top: int = TOP_HOSTS, scan: int = LANE_SCAN
) -> HostsReading:
    """The ``top`` hosts of the crawl under ``prefix`` by requests queued (then in flight),
    at ``clock`` (the Redis clock, for the pauses), over every partition. Plain reads, not
    one script: the figures of a host may be a lease apart, which a view can bear."""
    now_ms = clock * 1000
    queued: dict[str, int] = {}
    in_flight: dict[str, int] = {}
    paused: dict[str, float] = {}
    lanes = scanned = 0
    for part in partition_keys(client, FrontierKeys.for_prefix(prefix)):
        lanes += client.zcard(part.queue)
        names = [text(lane) for lane in client.zrange(part.queue, 0, scan - 1)]
        scanned += len(names)
        with client.pipeline(transaction=False) as pipe:
            for lane in names:
                pipe.llen(part.lane(lane))
            lengths = pipe.execute()
        for lane, length in zip(names, lengths, strict=True):
            host = lane.partition("|")[2]
            queued[host] = queued.get(host, 0) + int(length)
        for host, busy in client.hgetall(part.host_busy).items():
            in_flight[text(host)] = in_flight.get(text(host), 0) + int(busy)
        for host, until in client.zrangebyscore(part.host_paused, now_ms, "+inf", withscores=True):
            paused[text(host)] = max(0.0, (until - now_ms) / 1000)
    hosts = sorted(
        {host for host, count in queued.items() if count} | {h for h, n in in_flight.items() if n},
        key=lambda host: (-queued.get(host, 0), -in_flight.get(host, 0), host),
    )
    rows = [
        HostRow(host, queued.get(host, 0), in_flight.get(host, 0), round(paused.get(host, 0), 1))
        for host in hosts[:top]
    ]
    return HostsReading(top=rows, hosts=len(hosts), lanes=lanes, lanes_scanned=scanned)


def sample(status: FrontierStatus) -> dict[str, Any]:
    """One point of the history: the crawl's figures at the reading's clock. Pages per
    minute are the alive workers' own (each over its last minute), summed."""
    alive = status.alive
    per_worker = {str(w["worker"]): float(w.get("pages_per_min", 0.0)) for w in alive}
    return {
        "t": status.clock,
        "state": status.state,
        "pages": status.pages,
        "items": status.items,
        "bytes": status.bytes,
        "queued": status.queued,
        "leased": status.leased,
        "failed": status.failed,
        "quarantined": status.quarantined,
        "hosts_waiting": status.hosts_waiting,
        "workers_alive": len(alive),
        "pages_per_min": round(sum(per_worker.values()), 1),
        "workers_pages_per_min": per_worker,
    }


def shown(status: FrontierStatus) -> dict[str, Any]:
    """The figures in the units ``scrapy frontier`` prints them in (so the page and the
    terminal agree to the character)."""
    fill = status.seen_keys / status.filter_capacity if status.filter_capacity else 0.0
    return {
        "headline": status.headline(),
        "bytes": human_bytes(status.bytes),
        "elapsed": human_duration(status.elapsed) if status.elapsed is not None else "",
        "seen_fill": human_percent(fill) if status.seen_keys is not None else "",
        "seen_error": status.error_text() if status.seen_keys is not None else "",
        "filter_bytes": human_bytes(status.filter_bytes or 0),
        "clock": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(status.clock)),
        "workers_received": {
            str(w["worker"]): human_bytes(w.get("bytes_total", 0)) for w in status.workers
        },
    }


class LiveView:
    """The readings the page shows: the last one, with its hosts, and a history kept in
    this process. :meth:`refresh` is called by one thread; :meth:`snapshot` by the
    server's, any number at once."""

    def __init__(
        self,
        read: Callable[[], FrontierStatus],
        read_top_hosts: Callable[[float], HostsReading],
        interval: float,
        samples: int = HISTORY_SAMPLES,
    ) -> None:
        self.read = read
        self.read_top_hosts = read_top_hosts
        self.interval = interval
        self.history: deque[dict[str, Any]] = deque(maxlen=samples)
        self.status: FrontierStatus | None = None
        self.hosts = HostsReading()
        #: What went wrong at the last reading (None: it succeeded).
        self.error: str | None = None
        self._lock = threading.Lock()

    def refresh(self) -> None:
        """Read the crawl once and add the reading to the history. A Redis error is kept to
        show (the last reading stays) unless there is no reading yet: then it is raised,
        as the command's first reading would."""
        try:
            status = self.read()
            hosts = self.read_top_hosts(status.clock)
        except redis.RedisError as error:
            if self.status is None:
                raise
            with self._lock:
                self.error = f"cannot read the crawl from Redis: {error}".splitlines()[0]
            return
        with self._lock:
            self.status, self.hosts, self.error = status, hosts, None
            self.history.append(sample(status))

    def snapshot(self, since: float | None = None) -> dict[str, Any]:
        """What ``/status.json`` answers: the last reading as ``--json`` prints it, plus
        ``live`` (the history after clock ``since``, or all of it)."""
        with self._lock:
            status, hosts, error = self.status, self.hosts, self.error
            history = [point for point in self.history if since is None or point["t"] > since]
        assert status is not None, "refresh() before serving"
        return {
            **json.loads(status.to_json()),
            "live": {
                "interval": self.interval,
                "history_samples": self.history.maxlen,
                "history": history,
                "hosts": {**asdict(hosts), "partial": hosts.partial},
                "shown": shown(status),
                "error": error,
            },
        }


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address, as ``Host`` or a bind address gives it) is this
    machine's loopback.

    >>> is_loopback("127.0.0.1"), is_loopback("[::1]"), is_loopback("localhost"), is_loopback("a.b")
    (True, True, True, False)
    """
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def request_host(header: str | None) -> str:
    """The host of a ``Host`` header, without its port.

    >>> request_host("127.0.0.1:8080"), request_host("[::1]:80"), request_host("localhost")
    ('127.0.0.1', '[::1]', 'localhost')
    """
    value = (header or "").strip()
    if value.startswith("["):
        return value.split("]", 1)[0] + "]"
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class ViewServer(ThreadingHTTPServer):
    """The HTTP server of one :class:`LiveView`."""

    daemon_threads = True
    #: A second server on the same port must fail, not share it (newer Pythons' default).
    allow_reuse_port = False

    def __init__(self, address: str, port: int, view: LiveView) -> None:
        self.address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.view = view
        self.loopback_only = is_loopback(address)
        super().__init__((address, port), ViewHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown_host = f"[{host}]" if self.address_family == socket.AF_INET6 else host
        return f"http://{shown_host}:{port}/"

    def handle_error(self, request: object, client_address: object) -> None:
        """A browser closing its connection mid-answer is no error of the view."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ViewHandler(BaseHTTPRequestHandler):
    """``/`` (the page) and ``/status.json``; anything else is 404, a foreign host 421."""

    server: ViewServer

    def do_GET(self) -> None:
        if self.server.loopback_only and not is_loopback(request_host(self.headers["Host"])):
            self.answer(421, "text/plain", b"this view answers requests for a loopback host\n")
            return
        url = urlsplit(self.path)
        if url.path == "/":
            self.answer(200, "text/html; charset=utf-8", PAGE, {"Content-Security-Policy": CSP})
        elif url.path == "/status.json":
            since = parse_qs(url.query).get("since", [""])[0]
            try:
                after = float(since) if since else None
            except ValueError:
                self.answer(400, "text/plain", b"since: seconds since the epoch\n")
                return
            body = json.dumps(self.server.view.snapshot(after), sort_keys=True).encode()
            self.answer(200, "application/json", body)
        else:
            self.answer(404, "text/plain", b"not found: the view is / and /status.json\n")

    def answer(
        self, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a browser refreshing every interval would fill the terminal."""


def open_server(address: str, port: int, view: LiveView) -> ViewServer:
    """The server bound to ``address:port``, or :class:`ServeFailed` saying why not."""
    try:
        return ViewServer(address, port, view)
    except OSError as error:
        where = f"{address}:{port}"
        if error.errno == errno.EADDRINUSE:
            raise ServeFailed(
                f"cannot serve on {where}: the port is in use (another --serve?); "
                "choose another PORT, or 0 for any free one"
            ) from error
        reason = error.strerror or str(error)
        raise ServeFailed(
            f"cannot serve on {where}: {reason} (check --serve-address and PORT)"
        ) from error


def serve(view: LiveView, address: str, port: int, name: str, out: TextIO = sys.stdout) -> None:
    """Serve ``view`` on ``address:port`` (0: any free port), reading the crawl every
    ``view.interval`` seconds, until Ctrl-C; says where on ``out``, and when it stopped."""
    server = open_server(address, port, view)
    thread = threading.Thread(target=server.serve_forever, name="liveview", daemon=True)
    try:
        view.refresh()
        thread.start()
        print(f"serving crawl {name} at {server.url} (Ctrl-C stops)", file=out, flush=True)
        while True:
            time.sleep(view.interval)
            view.refresh()
    except KeyboardInterrupt:
        print(f"\nstopped serving crawl {name}", file=out, flush=True)
    finally:
        if thread.is_alive():
            server.shutdown()
        server.server_close()


STYLE = """
:root{--fg:#1d2433;--mute:#667085;--line:#e4e7ec;--bg:#f7f8fa;--card:#fff;--accent:#2f6fed;
--warn:#b54708;--bad:#c0262d;--good:#067647}
*{box-sizing:border-box}
body{margin:0;font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);
background:var(--bg)}
header{display:flex;gap:16px;align-items:baseline;flex-wrap:wrap;padding:14px 20px;
background:var(--card);border-bottom:1px solid var(--line)}
h1{font-size:20px;margin:0}
h2{font-size:15px;margin:0 0 8px}
.state{padding:2px 10px;border-radius:10px;font-weight:600;background:#eef2ff;color:var(--accent)}
.state.finished{background:#ecfdf3;color:var(--good)}
.state.stopped{background:#fffaeb;color:var(--warn)}
.mute{color:var(--mute)}
main{padding:16px 20px;display:grid;gap:16px}
.banner{display:none;padding:8px 12px;border-radius:6px;background:#fef3f2;color:var(--bad);
border:1px solid #fecdca}
.banner.on{display:block}
.tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px}
.tile,.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 12px}
.tile b{display:block;font-size:22px;font-variant-numeric:tabular-nums}
.tile span{color:var(--mute);font-size:12px}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:10px}
.chart svg{width:100%;height:90px;display:block}
.chart .now{float:right;font-weight:600;font-variant-numeric:tabular-nums}
path.area{stroke:none;opacity:.15}
path.line{fill:none;stroke-width:1.6}
.chart .top{font-size:11px}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{text-align:right;padding:4px 8px;border-bottom:1px solid var(--line);white-space:nowrap}
th:first-child,td:first-child{text-align:left}
td.name{font-family:ui-monospace,monospace;overflow:hidden;text-overflow:ellipsis;max-width:420px}
td svg{width:120px;height:22px;vertical-align:middle}
footer{padding:0 20px 16px;color:var(--mute);font-size:12px}
"""

SCRIPT = """
"use strict";
const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const CHARTS = [
  ["pages_per_min", "pages per minute", "#2f6fed"],
  ["queued", "queued", "#7a5af8"],
  ["leased", "leased", "#0e9384"],
  ["failed", "failed (total)", "#c0262d"],
];
let history = [];
let since = null;
let interval = 2;
const count = (n) => (n === null || n === undefined) ? "-" : Number(n).toLocaleString("en-US");
function cell(row, value, cls, field) {
  const td = row.insertCell();
  td.textContent = value;
  if (cls) td.className = cls;
  if (field) td.dataset.field = field;
  return td;
}
function path(values, width, height, area) {
  if (!values.length) return "";
  const top = Math.max(1, ...values);
  const step = values.length > 1 ? width / (values.length - 1) : 0;
  const y = (v) => (height - 2 - (v / top) * (height - 4)).toFixed(1);
  let d = values.map((v, i) => (i ? "L" : "M") + (i * step).toFixed(1) + " " + y(v)).join(" ");
  if (values.length === 1) d += " L" + width + " " + y(values[0]);
  if (area) d += " L" + width + " " + height + " L0 " + height + " Z";
  return d;
}
function spark(svg, values, color, width, height) {
  svg.setAttribute("viewBox", "0 0 " + width + " " + height);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.replaceChildren();
  for (const area of [true, false]) {
    const p = document.createElementNS(SVG, "path");
    p.setAttribute("d", path(values, width, height, area));
    p.setAttribute("class", area ? "area" : "line");
    p.setAttribute(area ? "fill" : "stroke", color);
    if (!area) { p.setAttribute("fill", "none"); p.setAttribute("stroke-width", "1.6"); }
    svg.appendChild(p);
  }
}
function drawCharts() {
  const box = $("charts");
  if (!box.children.length) {
    for (const [key, label] of CHARTS) {
      const card = document.createElement("div");
      card.className = "card chart";
      card.innerHTML = '<span class="now"></span><h2></h2><span class="top mute"></span>';
      card.querySelector("h2").textContent = label;
      card.querySelector(".now").dataset.chart = key;
      card.appendChild(document.createElementNS(SVG, "svg"));
      box.appendChild(card);
    }
  }
  CHARTS.forEach(([key, , color], i) => {
    const card = box.children[i];
    const values = history.map((p) => p[key]);
    card.querySelector(".now").textContent = values.length ? count(values[values.length - 1]) : "-";
    card.querySelector(".top").textContent = "top of the chart: " + count(Math.max(1, ...values));
    spark(card.querySelector("svg"), values, color, 300, 90);
  });
  const first = history[0], last = history[history.length - 1];
  $("span").textContent = first ? "over the last " + Math.round(last.t - first.t) + " s, "
    + history.length + " readings" : "";
}
function figures(s) {
  const shown = s.live.shown;
  const set = (key, value) => {
    document.querySelector('[data-figure="' + key + '"]').textContent = value;
  };
  set("pages", count(s.pages));
  set("pages_per_min", count(history.length ? history[history.length - 1].pages_per_min : 0));
  set("queued", count(s.queued));
  set("leased", count(s.leased));
  set("failed", count(s.failed));
  set("quarantined", count(s.quarantined));
  set("workers", count(s.workers.filter((w) => w.alive).length));
  set("items", count(s.items));
  set("bytes", shown.bytes);
  set("elapsed", shown.elapsed || "-");
  set("hosts_waiting", count(s.hosts_waiting));
  set("seen", s.seen_keys === null ? "-" : count(s.seen_keys));
  $("seen-note").textContent = s.seen_keys === null ? "seen keys: no filter yet"
    : "seen keys, " + shown.seen_fill + " of capacity, expected error " + shown.seen_error;
}
function workers(s) {
  const body = $("workers");
  body.replaceChildren();
  for (const w of s.workers) {
    const row = body.insertRow();
    const name = w.worker || "(no owner)";
    row.dataset.worker = name;
    cell(row, name, "name");
    cell(row, count(w.leased), "", "leased");
    if (!w.alive) {
      cell(row, "(not reporting)").colSpan = 5;
      continue;
    }
    cell(row, count(w.pages_total), "", "pages");
    cell(row, Number(w.pages_per_min || 0).toFixed(1), "", "pages_per_min");
    cell(row, s.live.shown.workers_received[name] || "", "", "received");
    cell(row, count(w.leases_taken), "", "leases_taken");
    const svg = document.createElementNS(SVG, "svg");
    cell(row, "").appendChild(svg);
    spark(svg, history.map((p) => p.workers_pages_per_min[name] || 0), "#2f6fed", 120, 22);
  }
  $("no-workers").hidden = s.workers.length > 0;
}
function hosts(s) {
  const found = s.live.hosts;
  const body = $("hosts");
  body.replaceChildren();
  for (const h of found.top) {
    const row = body.insertRow();
    row.dataset.host = h.host;
    cell(row, h.host || "(no host)", "name");
    cell(row, count(h.queued), "", "queued");
    cell(row, count(h.in_flight), "", "in_flight");
    cell(row, h.paused_for ? h.paused_for.toFixed(1) + " s" : "", "", "paused_for");
  }
  $("hosts-note").textContent = "top " + found.top.length + " of " + count(found.hosts)
    + " hosts with requests queued or in flight"
    + (found.partial ? " (read from the first " + count(found.lanes_scanned) + " of "
      + count(found.lanes) + " lanes)" : "");
}
function render(s) {
  document.title = "crawl " + s.name + ": " + s.state;
  $("name").textContent = "crawl " + s.name;
  const state = $("state");
  state.textContent = s.state;
  state.className = "state " + s.state;
  $("clock").textContent = s.live.shown.clock;
  $("headline").textContent = s.live.shown.headline;
  const error = s.live.error;
  $("error").textContent = error
    ? error + " (showing the reading of " + s.live.shown.clock + ")" : "";
  $("error").classList.toggle("on", Boolean(error));
  figures(s);
  drawCharts();
  workers(s);
  hosts(s);
  $("interval").textContent = String(interval);
  $("kept").textContent = count(s.live.history_samples);
  document.body.dataset.clock = String(s.clock);
  document.body.dataset.state = s.state;
  document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
}
async function refresh() {
  try {
    const answer = await fetch(since === null ? "status.json" : "status.json?since=" + since,
                               {cache: "no-store"});
    if (!answer.ok) throw new Error("HTTP " + answer.status);
    const s = await answer.json();
    interval = s.live.interval;
    history = history.concat(s.live.history).slice(-s.live.history_samples);
    if (history.length) since = history[history.length - 1].t;
    render(s);
    $("offline").classList.remove("on");
  } catch (error) {
    $("offline").textContent = "this view's server does not answer (" + error.message
      + "): is scrapy frontier --serve still running?";
    $("offline").classList.add("on");
  }
  setTimeout(refresh, interval * 1000);
}
refresh();
"""

BODY = """<header><h1 id="name">crawl</h1><span id="state" class="state">loading</span>
<span id="clock" class="mute"></span><span id="headline"></span></header>
<main>
<div id="error" class="banner"></div><div id="offline" class="banner"></div>
<section class="tiles">
<div class="tile"><b data-figure="pages">-</b><span>pages</span></div>
<div class="tile"><b data-figure="pages_per_min">-</b><span>pages per minute</span></div>
<div class="tile"><b data-figure="queued">-</b><span>queued</span></div>
<div class="tile"><b data-figure="leased">-</b><span>leased</span></div>
<div class="tile"><b data-figure="failed">-</b><span>failed</span></div>
<div class="tile"><b data-figure="quarantined">-</b><span>quarantined</span></div>
<div class="tile"><b data-figure="workers">-</b><span>workers alive</span></div>
<div class="tile"><b data-figure="items">-</b><span>items</span></div>
<div class="tile"><b data-figure="bytes">-</b><span>received</span></div>
<div class="tile"><b data-figure="elapsed">-</b><span>elapsed</span></div>
<div class="tile"><b data-figure="hosts_waiting">-</b><span>hosts waiting on politeness</span></div>
<div class="tile"><b data-figure="seen">-</b><span id="seen-note">seen keys</span></div>
</section>
<section><h2>Over time <span id="span" class="mute"></span></h2>
<div id="charts" class="charts"></div></section>
<section class="card"><h2>Workers</h2><table><thead><tr><th>worker</th><th>leased</th>
<th>pages</th><th>pages/min</th><th>received</th><th>leases taken</th><th>pages/min over time</th>
</tr></thead><tbody id="workers"></tbody></table>
<p id="no-workers" class="mute">no worker alive or holding leases</p></section>
<section class="card"><h2>Hosts by queue</h2><table><thead><tr><th>host</th><th>queued</th>
<th>in flight</th><th>paused for</th></tr></thead><tbody id="hosts"></tbody></table>
<p id="hosts-note" class="mute"></p></section>
</main>
<footer>Read every <span id="interval">2</span> s by <code>scrapy frontier --serve</code>,
which keeps the last <span id="kept">-</span> readings; the figures as JSON:
<a href="status.json">status.json</a>.</footer>"""


def _digest(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


#: Nothing but the page's own style and script, and fetches of its own server.
CSP = (
    f"default-src 'none'; style-src {_digest(STYLE)}; script-src {_digest(SCRIPT)}; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'"
)
PAGE = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8">'
    '<meta name="viewport" content="width=device-width, initial-scale=1">'
    '<title>scrapy frontier</title><link rel="icon" href="data:,">'
    f"<style>{STYLE}</style></head>"
    f"<body>{BODY}<script>{SCRIPT}</script></body></html>"
).encode()
