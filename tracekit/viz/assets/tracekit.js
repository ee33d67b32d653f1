// Clientside callbacks of tracekit viz (registered in tracekit/viz/app.py).
// Navigation and view gating run in the browser: a click goes straight to the requests of the
// views it changes, with no server round trip first (~20-50 ms saved per step/node change),
// and views on hidden tabs are not recomputed until their tab is shown.
window.dash_clientside = Object.assign({}, window.dash_clientside, {
  tracekit: {
    // -> [step, node, tab, play timer disabled, play button label]
    navigate: function (prev, next, graphClick, timelineClick, rooflineClick, gotos, ticks,
                        step, node, meta) {
      const nu = window.dash_clientside.no_update;
      const keep = [nu, nu, nu, nu, nu];
      const trig = (window.dash_clientside.callback_context.triggered || [])[0];
      // A goto link that was just rendered triggers with n_clicks null: not a click.
      if (!trig || !trig.value) return keep;
      const cut = trig.prop_id.lastIndexOf('.');
      const idText = trig.prop_id.slice(0, cut);
      if (idText === 'step-prev') return [Math.max(step - 1, 0), nu, nu, nu, nu];
      if (idText === 'step-next') return [Math.min(step + 1, meta.n_steps - 1), nu, nu, nu, nu];
      if (idText === 'play-timer') {
        if (node + 1 < meta.n_nodes) return [nu, node + 1, nu, nu, nu];
        if (step + 1 < meta.n_steps) return [step + 1, 0, nu, nu, nu];
        return [nu, nu, nu, true, 'play'];  // end of the trace: stop
      }
      if (idText.charAt(0) === '{') {  // a goto link: {type, node, step, src}
        if (typeof trig.value !== 'number') return keep;
        const id = JSON.parse(idText);
        if (id.step >= 0) return [id.step, id.node, 'graph', nu, nu];
        return [nu, id.node, nu, nu, nu];
      }
      const pt = trig.value.points && trig.value.points[0];
      if (!pt) return keep;
      let hit = null;
      if (idText === 'graph') {
        // heatmap cell (x = column, y = row) -> node id; -1 marks an empty cell
        const row = meta.cells[pt.y];
        hit = row === undefined ? null : row[pt.x];
      } else if (typeof pt.customdata === 'number') {
        hit = pt.customdata;  // timeline bars and roofline points carry their node id
      }
      return (hit === null || hit === undefined || hit < 0) ? keep : [nu, hit, nu, nu, nu];
    },

    togglePlay: function (clicks, disabled) {
      return disabled ? [false, 'pause'] : [true, 'play'];
    },

    stepInfo: function (step, meta) {
      return meta.info[step];
    },

    // The key a view's server callback listens to, set only while that view's tab is shown.
    gate: function (tab, want, value) {
      return tab === want ? value : window.dash_clientside.no_update;
    },

    compareClick: function (click) {
      const pt = click && click.points && click.points[0];
      return (pt && typeof pt.customdata === 'number') ? pt.customdata
        : window.dash_clientside.no_update;
    },
  },
});
