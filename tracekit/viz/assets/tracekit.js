// Clientside callbacks of tracekit viz (registered in tracekit/viz/app.py).
// Navigation and view gating run in the browser: a click goes straight to the requests of the
// views it changes, with no server round trip first (~20-50 ms saved per step/node change),
// and views on hidden tabs are not recomputed until their tab is shown.

// The node detail's tables are dcc.Markdown, which fetches and runs highlight.js (141 kB) on
// its first render to colour code blocks, unless a window.hljs is already there. The tables
// hold no code (app.md_text escapes every backtick): nothing to highlight.
if (!window.hljs) {
  window.hljs = {highlightElement: function () {}};
}

// Node links (class tk-link, data-node / data-step) have no Dash id: this one listener turns a
// click on any of them into an update of the `goto` store, which `navigate` listens to.
(function () {
  let seq = 0;
  document.addEventListener('click', function (ev) {
    const el = ev.target && ev.target.closest ? ev.target.closest('.tk-link[data-node]') : null;
    const dc = window.dash_clientside;
    if (!el || !dc || !dc.set_props) return;
    seq += 1;  // a new value per click, so the same link clicked twice still navigates
    // no data-step: stay at this step (null; a step position may be -1, the load phase)
    const step = el.dataset.step === undefined ? null : +el.dataset.step;
    dc.set_props('goto', {data: {node: +el.dataset.node, step: step, seq: seq}});
  });
})();

window.dash_clientside = Object.assign({}, window.dash_clientside, {
  tracekit: {
    // -> [step, node, tab, play timer disabled, play button label]
    // Node ids are global: graph nodes 0..n_nodes-1, then the load phase's n_load nodes (step
    // position -1 = meta.step_min, drawn from their own view with local ids 0..n_load-1).
    navigate: function (prev, next, graphClick, timelineClick, rooflineClick, goto, ticks,
                        step, node, meta) {
      const nu = window.dash_clientside.no_update;
      const keep = [nu, nu, nu, nu, nu];
      const trig = (window.dash_clientside.callback_context.triggered || [])[0];
      if (!trig || !trig.value) return keep;
      const cut = trig.prop_id.lastIndexOf('.');
      const idText = trig.prop_id.slice(0, cut);
      const inLoad = step < 0;
      const offset = inLoad ? meta.n_nodes : 0;  // local id of the view shown -> global id
      if (idText === 'step-prev') return [Math.max(step - 1, meta.step_min), nu, nu, nu, nu];
      if (idText === 'step-next') return [Math.min(step + 1, meta.n_steps - 1), nu, nu, nu, nu];
      if (idText === 'play-timer') {
        // the nodes of the step shown, in execution order; a selection of the other kind
        // (a load node at a step, a graph node at the load phase) starts from the first
        const first = offset, end = offset + (inLoad ? meta.n_load : meta.n_nodes);
        if (node < first || node >= end) return [nu, first, nu, nu, nu];
        if (node + 1 < end) return [nu, node + 1, nu, nu, nu];
        if (step + 1 < meta.n_steps) return [step + 1, 0, nu, nu, nu];
        return [nu, nu, nu, true, 'play'];  // end of the trace: stop
      }
      if (idText === 'goto') {  // a node link: {node, step (null: this step), seq}
        const g = trig.value;
        const total = meta.n_nodes + meta.n_load;
        if (typeof g.node !== 'number' || !(g.node >= 0 && g.node < total)) return keep;
        if (Number.isInteger(g.step) && g.step >= meta.step_min && g.step < meta.n_steps) {
          return [g.step, g.node, 'graph', nu, nu];
        }
        return [nu, g.node, nu, nu, nu];
      }
      const pt = trig.value.points && trig.value.points[0];
      if (!pt) return keep;
      let hit = null;
      if (idText === 'graph') {
        // heatmap cell (x = column, y = row) -> node id; -1 marks an empty cell
        const row = (inLoad ? meta.load_cells : meta.cells)[pt.y];
        hit = row === undefined ? null : row[pt.x];
      } else if (typeof pt.customdata === 'number') {
        hit = pt.customdata;  // timeline bars and roofline points carry their node id
      }
      return (hit === null || hit === undefined || hit < 0) ? keep
        : [nu, hit + offset, nu, nu, nu];
    },

    togglePlay: function (clicks, disabled) {
      return disabled ? [false, 'pause'] : [true, 'play'];
    },

    // -> [step info line, then one key per gated view (meta.views)]. A view's key (the list of
    // its dependencies' values), which its server callback listens to, is set only while the
    // view's tab is shown and only when the tab or one of those dependencies changed.
    route: function (tab, step, measure, node, meta) {
      const nu = window.dash_clientside.no_update;
      const props = meta.deps;  // dependency name -> 'id.prop'
      const values = {step: step, measure: measure, node: node};
      const trig = new Set(
        (window.dash_clientside.callback_context.triggered || []).map(t => t.prop_id));
      const out = [trig.has('step.value') ? meta.info[step - meta.step_min] : nu];
      for (const [, want, deps] of meta.views) {
        const hit = tab === want && (trig.has('tabs.value') || deps.some(k => trig.has(props[k])));
        out.push(hit ? deps.map(k => values[k]) : nu);
      }
      return out;
    },

    compareClick: function (click) {
      const pt = click && click.points && click.points[0];
      return (pt && typeof pt.customdata === 'number') ? pt.customdata
        : window.dash_clientside.no_update;
    },
  },
});
