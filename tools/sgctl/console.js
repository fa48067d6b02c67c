/*
 * The page of sgctl serve: polls /api/snapshot and draws the tables and
 * the charts.  Data goes into the page with textContent and SVG attributes
 * only, never as markup.
 */
(function () {
	'use strict';

	var POLL_MS = 1500;
	var WINDOW_S = 180;			/* the charts keep the last three minutes */
	var MIN_SPAN_S = 30;		/* and span at least 30 seconds */
	var MAX_POINTS = 200;
	var SVG = 'http://www.w3.org/2000/svg';
	var COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd',
				  '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];

	/* per section: [column, heading, kind]; kind: n number, f1 one decimal, t text, w wrapped text */
	var TABLES = {
		streams: [['stream', 'stream'], ['partitions', 'partitions', 'n'],
				  ['retention', 'retention'], ['retained_events', 'events', 'n'],
				  ['last_seq', 'last seq', 'n'], ['readable_horizon', 'horizon', 'n'],
				  ['in_flight', 'in flight', 'n'], ['append_rate', 'append/s', 'f1']],
		pipelines: [['pipeline', 'pipeline'], ['source', 'source'], ['state', 'state', 's'],
					['guarantee', 'guarantee'], ['workers', 'workers', 'n'],
					['events_per_sec', 'events/s', 'f1'], ['lag_events', 'lag', 'n'],
					['lag_seconds', 'lag s', 'f1'], ['batches', 'batches', 'n'],
					['restarts', 'restarts', 'n'], ['dead_letters', 'dead letters', 'n'],
					['worker_status', 'worker'], ['last_error', 'last error', 'w']],
		pipeline_workers: [['pipeline', 'pipeline'], ['worker', 'worker', 'n'],
						   ['worker_pid', 'pid', 'n'], ['partitions', 'partitions', 'a'],
						   ['events_per_sec', 'events/s', 'f1'], ['lag_events', 'lag', 'n'],
						   ['lag_seconds', 'lag s', 'f1'], ['worker_status', 'status']],
		consumers: [['stream', 'stream'], ['consumer', 'consumer'],
					['partitions', 'partitions', 'n'], ['lag_events', 'lag', 'n'],
					['lag_seconds', 'lag s', 'f1'], ['lost_events', 'lost', 'n'],
					['updated_at', 'updated', 'ts']],
		consumer_groups: [['stream', 'stream'], ['consumer', 'group'], ['member', 'member'],
						  ['partitions', 'partitions', 'a'], ['lag_events', 'lag', 'n'],
						  ['last_poll_at', 'last poll', 'ts'], ['lease_expires_at', 'lease until', 'ts']],
		windows: [['pipeline', 'pipeline'], ['kind', 'kind'], ['size', 'size'], ['emit', 'emit'],
				  ['watermark', 'watermark', 'ts'], ['open_windows', 'open', 'n'],
				  ['windows_closed', 'closed', 'n'], ['late_events', 'late', 'n'],
				  ['corrections', 'corrections', 'n']],
		captures: [['tab', 'table'], ['stream', 'stream'], ['owner', 'owner'],
				   ['backfill_state', 'backfill'], ['backfill_percent', '%', 'f1'],
				   ['backfill_rows', 'rows', 'n'], ['backfill_total', 'of about', 'n'],
				   ['backfill_error', 'error', 'w']],
		dead_letters: [['failed_at', 'failed at', 'ts'], ['pipeline', 'pipeline'],
					   ['partition', 'partition', 'n'], ['seq', 'seq', 'n'],
					   ['sqlstate', 'sqlstate'], ['error', 'error', 'w']]
	};

	var CHARTS = {
		'pipeline-rate': {section: 'pipelines', name: 'pipeline', value: 'events_per_sec'},
		'pipeline-lag': {section: 'pipelines', name: 'pipeline', value: 'lag_events'},
		'stream-rate': {section: 'streams', name: 'stream', value: 'append_rate'}
	};

	var history = {};			/* chart id -> series name -> [[t, v], ...] */
	var colorOf = {};

	function el(tag, text, cls) {
		var e = document.createElement(tag);
		if (text !== undefined && text !== null)
			e.textContent = String(text);
		if (cls)
			e.className = cls;
		return e;
	}

	function svg(tag, attrs) {
		var e = document.createElementNS(SVG, tag);
		Object.keys(attrs).forEach(function (k) { e.setAttribute(k, String(attrs[k])); });
		return e;
	}

	function clear(e) {
		while (e.firstChild)
			e.removeChild(e.firstChild);
	}

	function fmt(v, kind) {
		if (v === null || v === undefined)
			return '-';
		if (kind === 'f1' && typeof v === 'number')
			return Math.abs(v) < 0.05 ? '0.0' : v.toFixed(1);
		if (kind === 'a' && Array.isArray(v))
			return v.join(',');
		if (kind === 'ts' && typeof v === 'string')
			return v.replace('T', ' ').replace(/\.\d+/, '');
		if (typeof v === 'object')
			return JSON.stringify(v);
		return String(v);
	}

	function renderTable(id, rows) {
		var table = document.getElementById(id);
		var cols = TABLES[id];
		var tr = el('tr');

		clear(table);
		cols.forEach(function (c) { tr.appendChild(el('th', c[1])); });
		table.appendChild(tr);
		if (!Array.isArray(rows) || rows.length === 0) {
			tr = el('tr');
			var td = el('td', rows === null ? '(not available)' : '(none)', 'none');
			td.colSpan = cols.length;
			tr.appendChild(td);
			table.appendChild(tr);
			return;
		}
		rows.forEach(function (r) {
			tr = el('tr');
			cols.forEach(function (c) {
				var kind = c[2];
				var cls = kind === 'n' || kind === 'f1' ? 'num' : kind === 'w' ? 'wrap' : '';
				if (kind === 's')
					cls = 'state-' + String(r[c[0]]).replace(/[^a-z_]/g, '');
				tr.appendChild(el('td', fmt(r[c[0]], kind), cls));
			});
			table.appendChild(tr);
		});
	}

	function color(name) {
		if (!(name in colorOf))
			colorOf[name] = COLORS[Object.keys(colorOf).length % COLORS.length];
		return colorOf[name];
	}

	function record(id, rows, now) {
		var c = CHARTS[id];
		var h = history[id] || (history[id] = {});

		if (!Array.isArray(rows))
			return;
		rows.forEach(function (r) {
			var v = Number(r[c.value]);
			var name = String(r[c.name]);
			var s = h[name] || (h[name] = []);

			s.push([now, isFinite(v) ? v : 0]);
			while (s.length > MAX_POINTS || (s.length && s[0][0] < now - WINDOW_S * 1000))
				s.shift();
		});
		/* series of objects that went away age out */
		Object.keys(h).forEach(function (name) {
			var s = h[name];
			if (s.length === 0 || s[s.length - 1][0] < now - WINDOW_S * 1000)
				delete h[name];
		});
	}

	function niceMax(v) {
		if (!(v > 0))
			return 1;
		var p = Math.pow(10, Math.floor(Math.log10(v)));
		var steps = [1, 2, 2.5, 5, 10];
		for (var i = 0; i < steps.length; i++)
			if (steps[i] * p >= v)
				return steps[i] * p;
		return 10 * p;
	}

	function drawChart(id, now) {
		var root = document.getElementById('chart-' + id);
		var legend = document.getElementById('legend-' + id);
		var h = history[id] || {};
		var W = 480, H = 180, L = 48, R = 8, T = 8, B = 20;
		var max = 0;
		var names = Object.keys(h).sort();
		var oldest = now;

		names.forEach(function (n) { if (h[n].length && h[n][0][0] < oldest) oldest = h[n][0][0]; });
		/* the x axis: from the oldest point kept (30 s to 3 min) to now */
		var span = Math.min(WINDOW_S, Math.max(MIN_SPAN_S, Math.ceil((now - oldest) / 30000) * 30)) * 1000;

		names.forEach(function (n) { h[n].forEach(function (p) { if (p[1] > max) max = p[1]; }); });
		max = niceMax(max);
		clear(root);
		clear(legend);
		for (var i = 0; i <= 4; i++) {
			var y = T + (H - T - B) * i / 4;
			root.appendChild(svg('line', {x1: L, x2: W - R, y1: y, y2: y, stroke: '#e3e8ef'}));
			var label = svg('text', {x: L - 4, y: y + 4, 'text-anchor': 'end', 'font-size': 10, fill: '#5b6575'});
			var v = max * (4 - i) / 4;
			label.textContent = v >= 1000 ? (v / 1000).toFixed(v >= 10000 ? 0 : 1) + 'k' : String(+v.toFixed(2));
			root.appendChild(label);
		}
		[3, 2, 1, 0].map(function (k) {
			var secs = Math.round(span * k / 3000);
			return k === 0 ? 'now' : secs % 60 === 0 ? '-' + secs / 60 + ' min' : '-' + secs + ' s';
		}).forEach(function (t, k) {
			var x = L + (W - L - R) * k / 3;
			var tl = svg('text', {x: x, y: H - 5, 'text-anchor': k === 0 ? 'start' : k === 3 ? 'end' : 'middle',
								  'font-size': 10, fill: '#5b6575'});
			tl.textContent = t;
			root.appendChild(tl);
		});
		names.forEach(function (n) {
			var d = h[n].map(function (p, k) {
				var x = L + (W - L - R) * (1 - (now - p[0]) / span);
				var y = T + (H - T - B) * (1 - p[1] / max);
				return (k ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(1);
			}).join(' ');
			var path = svg('path', {d: d, fill: 'none', stroke: color(n), 'stroke-width': 2, 'class': 'series'});
			path.setAttribute('data-series', n);
			root.appendChild(path);
			var item = el('span');
			var sw = el('span', null, 'swatch');
			sw.style.backgroundColor = color(n);
			item.appendChild(sw);
			item.appendChild(document.createTextNode(n));
			legend.appendChild(item);
		});
		if (names.length === 0) {
			var none = svg('text', {x: W / 2, y: H / 2, 'text-anchor': 'middle', 'font-size': 12, fill: '#7a8494'});
			none.textContent = 'no data';
			root.appendChild(none);
		}
	}

	function setStatus(text, ok) {
		var s = document.getElementById('status');
		s.textContent = text;
		s.className = 'status ' + (ok ? 'ok' : 'bad');
	}

	function render(snap) {
		var now = Date.now();
		var errors = snap.errors || {};

		if (snap.session)
			document.getElementById('session').textContent =
				'role ' + snap.session.role + ' \u00b7 database ' + snap.session.database +
				' \u00b7 PostgreSQL ' + snap.session.server_version;
		Object.keys(TABLES).forEach(function (id) {
			renderTable(id, snap[id] === undefined ? null : snap[id]);
			document.getElementById('err-' + id).textContent = errors[id] ? String(errors[id]) : '';
		});
		Object.keys(CHARTS).forEach(function (id) {
			record(id, snap[CHARTS[id].section], now);
			drawChart(id, now);
		});
		var nerr = Object.keys(errors).length;
		setStatus((nerr ? nerr + ' view(s) failed \u00b7 ' : 'live \u00b7 ') +
				  new Date(now).toLocaleTimeString(), nerr === 0);
	}

	function poll() {
		fetch('/api/snapshot', {cache: 'no-store', credentials: 'omit'})
			.then(function (r) {
				return r.json().then(function (j) {
					if (!r.ok)
						throw new Error(j && j.error ? j.error : 'HTTP ' + r.status);
					return j;
				});
			})
			.then(render)
			.catch(function (e) { setStatus('error: ' + e.message, false); })
			.then(function () { setTimeout(poll, POLL_MS); });
	}

	document.addEventListener('DOMContentLoaded', poll);
})();
