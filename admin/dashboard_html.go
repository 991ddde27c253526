package admin

// dashboardHTML is the live page: no external script, style or font. It
// polls dashboard.json every second and draws, per activity, the stock
// remaining per SKU, answers/s by code and the buy p99 (each over the last
// two minutes, inline SVG), plus the shop's p99 for winners; pause/resume
// buttons call the admin API with the token typed on the page (kept in
// sessionStorage, sent as a Bearer header, never in a URL).
//
// Test hooks: every chart is <svg class="chart" data-chart="KIND"
// data-activity="ID">, each line a <polyline data-series="NAME"
// data-points="N">; #ticks counts the polls drawn.
const dashboardHTML = `<!doctype html>
<html><head><meta charset="utf-8"><title>seckill-proxy</title>
<meta name="viewport" content="width=device-width,initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:20px;background:#f6f7f9;color:#222}
h1{font-size:20px;margin:0 0 8px} h2{font-size:16px;margin:0}
.bar{display:flex;gap:12px;align-items:center;flex-wrap:wrap;margin-bottom:8px}
.act,.box{background:#fff;border:1px solid #ddd;border-radius:8px;padding:12px 16px;margin:12px 0}
.head{display:flex;gap:12px;align-items:center;flex-wrap:wrap}
.charts{display:flex;gap:16px;flex-wrap:wrap;margin-top:8px}
.chartbox{flex:1 1 320px;min-width:300px;max-width:560px} .chartbox .ttl{color:#555;font-size:12px;margin-bottom:2px}
svg.chart{width:100%;height:140px;background:#fcfcfd;border:1px solid #eee;border-radius:4px}
svg.chart polyline{fill:none;stroke-width:1.8} svg.chart text{font-size:10px;fill:#888}
.legend{font-size:12px;color:#444;margin-top:2px} .legend span{margin-right:10px;white-space:nowrap}
.legend i{display:inline-block;width:10px;height:3px;margin-right:4px;vertical-align:middle}
table{border-collapse:collapse;margin-top:8px} td,th{padding:2px 10px;text-align:right} th{color:#666;font-weight:500}
td:first-child,th:first-child{text-align:left} .state{font-weight:600;padding:2px 8px;border-radius:4px;background:#eee}
.open{background:#d4f7d4}.sold_out{background:#f7d4d4}.paused{background:#ffe2b3}.ended{background:#ddd}.upcoming{background:#d8e8ff}
.bad{color:#b00;font-weight:600} .muted{color:#888} button{padding:3px 12px;border-radius:4px;border:1px solid #aaa;background:#fff;cursor:pointer}
button:hover{background:#eef} #msg{font-size:13px}
</style></head><body>
<div class="bar"><h1>seckill-proxy</h1><span class="muted" id="t"></span><span class="muted">polls: <b id="ticks">0</b></span>
<label>admin token <input type="password" id="token" size="18" autocomplete="off"></label><span id="msg" class="muted"></span></div>
<div class="box"><h2>Shop latency (winners)</h2><div class="charts" id="shopcharts"></div></div>
<div id="acts"></div>
<script>
"use strict";
const KEEP = 120, COLORS = ['#1f77b4','#d62728','#2ca02c','#ff7f0e','#9467bd','#8c564b','#e377c2','#17becf','#7f7f7f','#bcbd22'];
const hist = {}; // activity id -> {t:[], stock:{}, codes:{}, p99:[]}
const shopHist = {t:[], p50:[], p99:[]};
let prev = null, ticks = 0;
function esc(s){return String(s).replace(/[&<>"']/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c]))}
function push(a, v){ a.push(v); if (a.length > KEEP) a.shift(); }
function series(map, name, len){ if (!map[name]) map[name] = new Array(Math.max(0, len-1)).fill(null); return map[name]; }
// q-quantile in ms of the observations between two cumulative histograms.
function quantile(cur, old, q){
  if (!cur) return null;
  const n = cur.n - (old ? old.n : 0); if (n <= 0) return null;
  const rank = q*n; let lower = 0, below = 0;
  for (let i = 0; i < cur.le.length; i++) {
    const c = cur.c[i] - (old ? old.c[i] : 0);
    if (c >= rank) return (c === below ? cur.le[i] : lower + (cur.le[i]-lower)*(rank-below)/(c-below))*1000;
    lower = cur.le[i]; below = c;
  }
  return cur.le.length ? cur.le[cur.le.length-1]*1000 : null;
}
function fmt(v){ if (v === null || v === undefined) return '-'; const a = Math.abs(v);
  return a >= 1000 ? (v/1000).toFixed(1)+'k' : a >= 10 ? v.toFixed(0) : a >= 1 ? v.toFixed(1) : v.toFixed(2); }
// chart draws lines (name -> values, null = no data) against times t.
function chart(kind, act, title, t, lines, unit){
  const W = 400, H = 140, L = 34, R = 6, T = 8, B = 16;
  let max = 0; for (const k in lines) for (const v of lines[k]) if (v !== null && v > max) max = v;
  max = max > 0 ? max*1.1 : 1;
  const t0 = t.length ? t[0] : 0, t1 = t.length ? t[t.length-1] : 1, span = Math.max(t1 - t0, 1);
  let svg = '<svg class="chart" data-chart="'+kind+'" data-activity="'+esc(act)+'" viewBox="0 0 '+W+' '+H+'" preserveAspectRatio="none">';
  svg += '<line x1="'+L+'" y1="'+T+'" x2="'+L+'" y2="'+(H-B)+'" stroke="#ccc"/><line x1="'+L+'" y1="'+(H-B)+'" x2="'+(W-R)+'" y2="'+(H-B)+'" stroke="#ccc"/>';
  svg += '<text x="2" y="'+(T+8)+'">'+fmt(max)+'</text><text x="2" y="'+(H-B)+'">0</text>';
  svg += '<text x="'+L+'" y="'+(H-3)+'">-'+Math.round(span/1000)+'s</text><text x="'+(W-R-22)+'" y="'+(H-3)+'">now</text>';
  let legend = '', i = 0;
  for (const name of Object.keys(lines).sort()) {
    const vals = lines[name], color = COLORS[i++ % COLORS.length], pts = [];
    for (let j = 0; j < vals.length && j < t.length; j++) {
      if (vals[j] === null) continue;
      const x = L + (W-L-R)*(t[j]-t0)/span, y = (H-B) - (H-B-T)*vals[j]/max;
      pts.push(x.toFixed(1)+','+y.toFixed(1));
    }
    svg += '<polyline data-series="'+esc(name)+'" data-points="'+pts.length+'" stroke="'+color+'" points="'+pts.join(' ')+'"/>';
    let last = null; for (let j = vals.length-1; j >= 0; j--) if (vals[j] !== null) { last = vals[j]; break; }
    legend += '<span><i style="background:'+color+'"></i>'+esc(name)+' <b>'+fmt(last)+'</b>'+unit+'</span>';
  }
  return '<div class="chartbox"><div class="ttl">'+esc(title)+'</div>'+svg+'</svg><div class="legend">'+legend+'</div></div>';
}
function card(a){
  let el = document.getElementById('act-'+a.id);
  if (!el) {
    el = document.createElement('div'); el.className = 'act'; el.id = 'act-'+a.id;
    el.innerHTML = '<div class="head"><h2>'+esc(a.id)+'</h2><span class="state"></span>' +
      '<button data-op="pause">Pause</button><button data-op="resume">Resume</button><span class="err bad"></span></div>' +
      '<div class="charts"></div><table class="skus"></table>';
    for (const b of el.querySelectorAll('button')) b.onclick = () => control(a.id, b.dataset.op);
    document.getElementById('acts').appendChild(el);
  }
  return el;
}
async function control(id, op){
  const tok = document.getElementById('token').value, msg = document.getElementById('msg');
  sessionStorage.setItem('seckill-admin-token', tok);
  if (!tok) { msg.textContent = 'type the admin token first'; msg.className = 'bad'; return; }
  try {
    const r = await fetch('admin/'+op+'?activity='+encodeURIComponent(id), {method:'POST', headers:{'Authorization':'Bearer '+tok}});
    const body = await r.json().catch(() => ({}));
    msg.textContent = r.ok ? op+' '+id+': done' : op+' '+id+': '+r.status+' '+(body.error||'');
    msg.className = r.ok ? 'muted' : 'bad';
  } catch (e) { msg.textContent = op+' failed: '+e; msg.className = 'bad'; }
}
async function tick(){
  let d; try { d = await (await fetch('dashboard.json', {cache:'no-store'})).json(); } catch(e) { return; }
  const now = d.server_time_ms, dt = prev ? (now - prev.server_time_ms)/1000 : 0;
  if (prev && dt <= 0) return;
  document.getElementById('t').textContent = new Date(now).toISOString();
  const old = {}; if (prev) for (const a of prev.activities || []) old[a.id] = a;
  push(shopHist.t, now);
  push(shopHist.p99, prev ? quantile(d.shop, prev.shop, 0.99) : null);
  push(shopHist.p50, prev ? quantile(d.shop, prev.shop, 0.5) : null);
  document.getElementById('shopcharts').innerHTML =
    chart('shop', '', 'shop latency for winners, ms', shopHist.t, {p50: shopHist.p50, p99: shopHist.p99}, ' ms');
  for (const a of d.activities || []) {
    const h = hist[a.id] || (hist[a.id] = {t:[], stock:{}, codes:{}, p99:[]}), o = old[a.id];
    push(h.t, now); const n = h.t.length;
    for (const s of a.skus || []) if (s.preheated) series(h.stock, s.id, n);
    for (const k in h.stock) { const s = (a.skus||[]).find(x => x.id === k); push(h.stock[k], s && s.preheated ? s.remaining : null); }
    const codes = a.codes || {}, oc = o ? (o.codes || {}) : {};
    for (const c in codes) series(h.codes, c, n);
    for (const c in h.codes) push(h.codes[c], o ? Math.max(0, ((codes[c]||0) - (oc[c]||0)) / dt) : null);
    push(h.p99, o ? quantile(a.buy, o.buy, 0.99) : null);
    const el = card(a);
    const st = el.querySelector('.state'); st.textContent = a.state; st.className = 'state '+a.state;
    el.querySelector('.err').textContent = a.error || '';
    el.querySelector('.charts').innerHTML =
      chart('stock', a.id, 'stock remaining per SKU', h.t, h.stock, '') +
      chart('answers', a.id, 'answers/s by code', h.t, h.codes, '/s') +
      chart('p99', a.id, 'buy latency p99, ms', h.t, {p99: h.p99}, ' ms');
    let rows = '<tr><th>sku</th><th>initial</th><th>remaining</th><th>pending</th><th>confirmed</th><th>released</th><th>ok</th></tr>';
    for (const s of a.skus || []) rows += '<tr><td>'+esc(s.id)+'</td><td>'+s.initial+'</td><td>'+s.remaining+'</td><td>'+s.pending+'</td><td>'+
      s.confirmed+'</td><td>'+s.released+'</td><td'+(s.ok?'>ok':' class="bad">'+esc(s.problem||'BROKEN'))+
      (s.preheated?'':' <span class="muted">not preheated</span>')+'</td></tr>';
    el.querySelector('.skus').innerHTML = rows;
  }
  prev = d; document.getElementById('ticks').textContent = String(++ticks);
}
document.getElementById('token').value = sessionStorage.getItem('seckill-admin-token') || '';
tick(); setInterval(tick, 1000);
</script></body></html>`
