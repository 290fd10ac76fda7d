// The job page's live parts: its events (a phase change re-renders the job's facts through
// htmx), its curves (uPlot: loss, learning rate and evaluations from the job's first step,
// then from progress events) and its log tail.
// The list pages' live part is htmx's SSE extension (refreshed on `changed`). Every page
// closes its streams when it is hidden: a page kept in the back-forward cache kept them open,
// and after a few pages the browser's six connections to the coordinator were all held and
// the next page never loaded. A page shown again from that cache is reloaded, fresh.
"use strict";

(function () {
  const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"]);
  const MAX_LOG_LINES = 500;  // as streams.py LOG_TAIL: no more old lines are sent
  const sources = [];

  function stream(url) {
    const source = new EventSource(url);
    sources.push(source);
    return source;
  }

  window.addEventListener("pagehide", () => {
    for (const source of sources) source.close();
    // htmx's SSE extension closes an element's stream when the element is cleaned up.
    document.querySelectorAll("[sse-connect]").forEach((element) => htmx.remove(element));
  });
  window.addEventListener("pageshow", (event) => {
    if (event.persisted) window.location.reload();
  });

  // REST's events carry their moment as RFC 3339 UTC already (null: not happened).
  function moment(value) {
    return value || "-";
  }

  // Tick labels a reader can tell apart: as many decimals as the spacing of the ticks needs
  // (0.002, 0.004, 0.006, not "0" three times), powers of ten for the very small or large.
  function ticks(u, splits, axis, space, spacing) {
    if (!splits.length) return [];
    // The decimals `step` has of its own: 0.25 needs 2 (2.75, not "2.8").
    const decimalsOf = (step) => {
      let decimals = 0;
      while (decimals < 8 && Math.abs(step * 10 ** decimals - Math.round(step * 10 ** decimals)) > 1e-6) {
        decimals += 1;
      }
      return decimals;
    };
    const largest = Math.max(...splits.map(Math.abs));
    if (largest !== 0 && (largest < 1e-3 || largest >= 1e5)) {
      const digits = decimalsOf((spacing || largest) / 10 ** Math.floor(Math.log10(largest)));
      return splits.map((v) => (v === 0 ? "0" : v.toExponential(digits)));
    }
    const decimals = decimalsOf(spacing || 1);
    return splits.map((v) => (v === 0 ? "0" : v.toFixed(decimals)));
  }

  // The curves from the job's first step: its metrics file read by the coordinator
  // (/curves), then the progress reports as they come. Points are kept by step; a step not
  // after the last starts a new run there (a restart resumed from a checkpoint): the old
  // run's points from that step on are dropped, as domain/curves.py does with the file.
  function chart(root) {
    const MAX_POINTS = 10000;
    const RELOAD_MS = 5000;
    const train = new Map();  // step -> [loss, learning rate]
    let evals = new Map();  // step -> [loss, accuracy]
    let loadedEvals = false;  // the file had evaluations: live ones wait for it
    let lastEval = null;  // the newest evaluation a progress report carried
    let loading = null;
    let problem = "";
    let lastLive = 0;  // the step of the newest progress report
    // An eval job reports its evaluation's loss as its progress: it has no training curve.
    const trains = root.dataset.mode !== "eval";
    const where = document.getElementById("chart");
    const accuracyWhere = document.getElementById("accuracy-chart");
    const status = document.getElementById("curves-status");
    const width = (element) => Math.max(320, element.clientWidth || 640);
    const drawnTicks = (name) => (u, splits, axis, space, spacing) => {
      const labels = ticks(u, splits, axis, space, spacing);
      where.dataset[name] = labels.join(" ");
      return labels;
    };
    const plot = new uPlot({
      width: width(where), height: 240,
      scales: { x: { time: false }, lr: {} },
      axes: [{ label: "step" }, { label: "loss", size: 70, values: drawnTicks("lossTicks") },
        { side: 1, scale: "lr", label: "learning rate", size: 80, grid: { show: false },
          values: drawnTicks("lrTicks") }],
      series: [{ label: "step" }, { label: "loss", stroke: "#0b57d0", width: 2, spanGaps: true },
        { label: "eval loss", stroke: "#1b6e2a", width: 2, spanGaps: true, points: { show: true, size: 7 } },
        { label: "learning rate", stroke: "#9b1c1c", scale: "lr", dash: [6, 4], width: 2, spanGaps: true }],
    }, [[], [], [], []], where);
    const accuracy = accuracyWhere && new uPlot({
      width: width(accuracyWhere), height: 200,
      scales: { x: { time: false }, pct: { range: [0, 100] } },
      axes: [{ label: "step" }, { scale: "pct", label: "accuracy (%)", size: 70, values: ticks }],
      series: [{ label: "step" }, { label: "eval accuracy (%)", scale: "pct", stroke: "#1b6e2a",
        width: 2, spanGaps: true, points: { show: true, size: 7 } }],
    }, [[], []], accuracyWhere);

    function cut(points, step) {
      for (const key of [...points.keys()]) if (key >= step) points.delete(key);
    }
    function thin(points) {
      if (points.size <= MAX_POINTS) return;
      const keys = [...points.keys()].sort((a, b) => a - b);
      keys.forEach((key, i) => { if (i % 2 === 1 && i !== keys.length - 1) points.delete(key); });
    }

    function draw() {
      const steps = [...new Set([...train.keys(), ...evals.keys()])].sort((a, b) => a - b);
      const pick = (points, i) => steps.map((s) => (points.has(s) ? points.get(s)[i] : null));
      plot.setData([steps, pick(train, 0), pick(evals, 0), pick(train, 1)]);
      const evalSteps = [...evals.keys()].sort((a, b) => a - b);
      if (accuracy) accuracy.setData([evalSteps, evalSteps.map((s) => 100 * evals.get(s)[1])]);
      const trained = [...train.keys()].sort((a, b) => a - b);
      where.dataset.points = String(trained.length);
      where.dataset.firstStep = String(trained.length ? trained[0] : "");
      where.dataset.lastStep = String(trained.length ? trained[trained.length - 1] : "");
      where.dataset.evalPoints = String(evalSteps.length);
      const parts = [];
      if (trained.length) {
        const last = train.get(trained[trained.length - 1]);
        parts.push(`${trained.length} points from step ${trained[0]} to ${trained[trained.length - 1]}; ` +
          `loss ${last[0].toFixed(4)}, learning rate ${last[1].toPrecision(3)} at the last`);
      }
      if (evalSteps.length) {
        const last = evals.get(evalSteps[evalSteps.length - 1]);
        parts.push(`${evalSteps.length} evaluation${evalSteps.length === 1 ? "" : "s"}; the last, ` +
          `at step ${evalSteps[evalSteps.length - 1]}: loss ${last[0].toFixed(4)}, accuracy ${(100 * last[1]).toFixed(1)}%`);
      }
      if (problem) parts.push(problem);
      status.textContent = parts.join(". ") || "no steps reported yet";
    }

    // The file's points replace what was drawn up to its last step; live points after it stay.
    async function load() {
      const answer = await fetch(`/ui/jobs/${root.dataset.jobId}/curves`, { credentials: "same-origin" });
      if (!answer.ok) throw new Error(`the curves could not be read (${answer.status})`);
      const body = await answer.json();
      const lastTrain = body.train.length ? body.train[body.train.length - 1][0] : 0;
      for (const key of [...train.keys()]) if (key <= lastTrain) train.delete(key);
      for (const [step, loss, rate] of body.train) train.set(step, [loss, rate]);
      if (body.eval.length) {
        loadedEvals = true;
        evals = new Map(body.eval.map(([step, loss, right]) => [step, [loss, right]]));
      }
      problem = body.problem || (body.thinned ? "long run: the curves are thinned" : "");
      thin(train);
      draw();
      where.dataset.loaded = "true";
    }
    // One read at a time, and a new evaluation's at most every RELOAD_MS: a job that
    // evaluates every step must not have each page read its file twice a second.
    let loadedAt = 0;
    let later = null;
    let again = false;
    function reload(now = true) {
      const wait = loadedAt + RELOAD_MS - Date.now();
      if (!now && wait > 0) {
        later = later || setTimeout(() => { later = null; reload(); }, wait);
        return;
      }
      if (loading) {
        again = true;  // what is read now may predate what asked: read once more after it
        return;
      }
      loadedAt = Date.now();
      loading = load().catch((error) => { problem = error.message; draw(); })
        .finally(() => {
          loading = null;
          if (again) {
            again = false;
            reload();
          }
        });
    }

    function add(progress) {
      if (!progress.step) return;
      if (!train.size && !evals.size) reload();  // the first report: the steps before it
      if (progress.step < lastLive) {  // a new run (a restart) from this step on
        cut(train, progress.step);
        cut(evals, progress.step);
      }
      lastLive = progress.step;
      if (trains) train.set(progress.step, [progress.loss, progress.learning_rate]);
      if (progress.eval_loss !== undefined && progress.eval_loss !== null) {
        const seen = `${progress.eval_loss} ${progress.eval_accuracy}`;
        if (seen !== lastEval) {
          lastEval = seen;
          // Where the file is read, it has the evaluation at its own step; else it is shown
          // at the step that reported it.
          if (!loadedEvals) evals.set(progress.step, [progress.eval_loss, progress.eval_accuracy]);
          reload(false);
        }
      }
      thin(train);
      draw();
      where.dataset.learningRate = String(progress.learning_rate);
    }

    const step = Number(root.dataset.step);
    if (step > 0 && trains) {
      train.set(step, [Number(root.dataset.loss), Number(root.dataset.lr)]);
      draw();
    }
    lastLive = step;
    reload();
    return { add, reload };
  }

  function followEvents(root, curves) {
    const rows = document.querySelector("#events-table tbody");
    const source = stream(`/ui/jobs/${root.dataset.jobId}/events`);
    source.addEventListener("phase", (message) => {
      const event = JSON.parse(message.data);
      const row = rows.insertRow();
      for (const text of [moment(event.time), event.from_phase || "-", event.to_phase, event.reason]) {
        row.insertCell().textContent = text;
      }
      htmx.trigger("#live", "refresh");
      if (TERMINAL.has(event.to_phase)) {
        source.close();
        document.querySelectorAll(".while-active").forEach((form) => form.remove());
        curves.reload();  // the file's last points (the final evaluation)
      }
    });
    source.addEventListener("progress", (message) => {
      const progress = JSON.parse(message.data).progress;
      if (!progress) return;
      curves.add(progress);
      const shown = document.getElementById("progress");
      if (shown) {
        shown.textContent = `step ${progress.step}/${progress.num_steps}, loss ${progress.loss.toFixed(4)}, ` +
          `learning rate ${progress.learning_rate.toPrecision(3)}, ${progress.steps_per_second.toFixed(1)} steps/s`;
      }
    });
    source.addEventListener("error", (message) => {
      if (message.data) {
        rows.insertRow().insertCell().textContent = JSON.parse(message.data).error.message;
        source.close();
      }
    });
  }

  function followLog(root) {
    const log = document.getElementById("log");
    const status = document.getElementById("log-status");
    const source = stream(`/ui/jobs/${root.dataset.jobId}/logs`);
    source.addEventListener("log", (message) => {
      const chunk = JSON.parse(message.data);
      const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
      const lines = log.textContent.split("\n").filter(Boolean);
      for (const line of chunk.lines) lines.push(`[${chunk.replica}] ${line}`);
      log.textContent = lines.slice(-MAX_LOG_LINES).join("\n") + "\n";
      if (atEnd) log.scrollTop = log.scrollHeight;
    });
    source.addEventListener("end", () => {
      status.textContent = "the job has ended: this is the whole log";
      source.close();
    });
    source.addEventListener("error", (message) => {
      if (message.data) {
        status.textContent = JSON.parse(message.data).error.message;
        source.close();
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const root = document.getElementById("job");
    if (!root) return;
    followEvents(root, chart(root));
    followLog(root);
  });
})();
