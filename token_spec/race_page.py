"""The pictures of a ``token_spec race``: ``race.html`` and ``race.png``, both from ``race.json``.

``render_html(race)``: one self-contained page (inline CSS and JS, nothing fetched) with
the race's data embedded as JSON. Without JavaScript it shows the final state; with
it, the lanes replay on one clock at their measured token timestamps (speed 1x, or
slowed down), each speculative round's tokens shaded as one block.
``render_png(race, path)``: the final state drawn with matplotlib, tokens over time
per lane (a lane's steps are its rounds).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from .report import pyplot

__all__ = ["render_html", "render_png"]

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.3em;margin:0 0 .3em} .meta{color:#555;margin:.2em 0}
table{border-collapse:collapse;margin:1em 0;background:#fff} th,td{border:1px solid #ddd;padding:.3em .6em}
th{background:#f0f0f0;text-align:left} td.n{text-align:right;font-variant-numeric:tabular-nums}
.no{color:#b00;font-weight:bold} .yes{color:#070} .na{color:#777}
.lane{display:grid;grid-template-columns:11em 1fr;gap:.6em;margin:.5em 0;background:#fff;border:1px solid #ddd;
 padding:.5em}
.name{font-weight:bold} .clock{font-variant-numeric:tabular-nums;color:#555;font-size:.9em}
.bar{height:6px;background:#eee;margin:.2em 0} .fill{height:6px;background:#2a7;width:0}
.text{white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:12.5px;min-height:2.6em}
.r0{background:#e3f1ff} .r1{background:#ffeccc} .diverge{outline:2px solid #c00} #controls button{margin-right:.4em}
"""

_JS = """
const race = JSON.parse(document.getElementById('race-data').textContent);
const end = Math.max(...race.lanes.map(l => l.seconds));
let speed = 1, start = null, frame = null;
function draw(t) {
  race.lanes.forEach((lane, i) => {
    let k = 0; while (k < lane.token_s.length && lane.token_s[k] <= t) k++;
    const box = document.getElementById('text-' + i);
    box.textContent = '';
    let prev = null, shade = 0, span = null;
    const first = lane.first_divergence;
    for (let j = 0; j < k; j++) {
      const fresh = lane.token_s[j] !== prev;
      if (fresh) { shade ^= 1; prev = lane.token_s[j]; }
      if (fresh || j === first || j === first + 1) {
        span = document.createElement('span');
        span.className = 'r' + shade + (j === first ? ' diverge' : '');
        box.appendChild(span);
      }
      span.textContent += lane.pieces[j];
    }
    document.getElementById('fill-' + i).style.width = (100 * k / race.max_tokens) + '%';
    document.getElementById('clock-' + i).textContent =
      k + ' tokens' + (k === lane.tokens.length ? ', done at ' + lane.seconds.toFixed(2) + ' s' : '');
  });
  document.getElementById('t').textContent = t.toFixed(2);
}
function tick(now) {
  if (start === null) start = now;
  const t = Math.min((now - start) / 1000 * speed, end);
  draw(t);
  if (t < end) frame = requestAnimationFrame(tick);
}
function play(s) { speed = s; start = null; if (frame) cancelAnimationFrame(frame); frame = requestAnimationFrame(tick); }
document.querySelectorAll('#controls button').forEach(b => b.onclick = () => play(parseFloat(b.dataset.speed)));
play(1);
"""


def _num(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _load(env: dict) -> str:
    load = env.get("load_average")
    return "-" if not load else " / ".join(f"{x:.1f}" for x in load)


def _verdict(lane: dict) -> str:
    cls = {"yes": "yes", "no": "no"}.get(lane["verdict"], "na")
    return f'<td class="{cls}">{html.escape(lane["verdict"])}</td>'


def render_html(race: dict) -> str:
    """The page (a string); ``race`` is a scored race (``token_spec.race.score``)."""
    e = html.escape
    rows = []
    for lane in race["lanes"]:
        first = lane["first_divergence"]
        rows.append(
            f'<tr><td>{e(lane["name"])}</td><td>{e(lane["engine"])}</td><td class="n">{len(lane["tokens"])}</td>'
            f'<td class="n">{lane["seconds"]:.2f}</td><td class="n">{_num(lane["tokens_per_s"], ".1f")}</td>'
            f'<td class="n">{_num(lane["tau"], ".2f")}</td>{_verdict(lane)}'
            f'<td class="n">{"-" if first is None else first}</td></tr>')
    lanes = []
    for i, lane in enumerate(race["lanes"]):
        lanes.append(
            f'<div class="lane"><div><div class="name">{e(lane["name"])}</div>'
            f'<div class="clock" id="clock-{i}">{len(lane["tokens"])} tokens, done at {lane["seconds"]:.2f} s</div>'
            f'</div><div><div class="bar"><div class="fill" id="fill-{i}" style="width:'
            f'{100 * len(lane["tokens"]) / race["max_tokens"]:.1f}%"></div></div>'
            f'<div class="text" id="text-{i}">{e("".join(lane["pieces"]))}</div></div></div>')
    env = race.get("environment", {})
    data = json.dumps(race, ensure_ascii=False).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>token_spec race</title><style>{_CSS}</style></head>
<body>
<h1>Decoding race: {e(race["model"])} ({e(race["target"])}), greedy, {race["max_tokens"]} tokens at most</h1>
<p class="meta">Prompt: <b>{e(race["prompt"])}</b> ({race["prompt_tokens"]} tokens with the chat template)</p>
<p class="meta">Lanes were decoded one after another on {env.get("cpus", "?")} CPUs (torch {e(str(env.get("torch")))},
threads {race["threads"] or "default"}, load average {_load(env)} at the end); this page replays them on one clock at their measured per-token timestamps
(prefill included). A shaded block is one target pass's tokens; a red box marks a lane's first token that differs
from our vanilla.</p>
<div id="controls">t = <span id="t">{max(lane["seconds"] for lane in race["lanes"]):.2f}</span> s &nbsp;
<button data-speed="1">replay 1x</button><button data-speed="0.25">replay 0.25x</button></div>
{"".join(lanes)}
<table><tr><th>lane</th><th>engine</th><th>tokens</th><th>seconds</th><th>tok/s</th>
<th>τ (tokens / target pass)</th><th>identical to vanilla</th><th>first divergence</th></tr>
{"".join(rows)}</table>
<p class="meta">Identity: greedy output compared token by token with our vanilla lane; llama.cpp runs other kernels,
so its output is not expected to match ours (its first divergence is shown).</p>
<script type="application/json" id="race-data">{data}</script>
<script>{_JS}</script>
</body></html>
"""


def render_png(race: dict, path: Path) -> None:
    """Tokens over time per lane, labelled with tok/s, τ and the identity verdict."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11.5, 4.8))
    for i, lane in enumerate(race["lanes"]):
        ts = [0.0] + list(lane["token_s"])
        ax.step(ts, range(len(ts)), where="post", color=plt.cm.tab10(i % 10), linestyle=("-", "--", ":")[i // 10 % 3],
                label=f"{lane['name']}: {_num(lane['tokens_per_s'], '.1f')} tok/s, τ {_num(lane['tau'], '.2f')}, "
                      f"identical: {lane['verdict']}")
    ax.set_xlabel("seconds since the lane's decode started (prefill included)")
    ax.set_ylabel("tokens emitted")
    ax.set_title(f"Decoding race: {race['model']} ({race['target']}), greedy, one prompt\n"
                 "lanes measured one after another, drawn on one clock", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
