// The job page's live parts: its events (a phase change re-renders the job's facts through
// htmx), its loss and learning-rate curves (uPlot, from progress events) and its log tail.
// The list pages' live part is htmx's SSE extension (refreshed on `changed`). Every page
// closes its streams when it is hidden: a page kept in the back-forward cache kept them open,
// and after a few pages the browser's six connections to the coordinator were all held and
// the next page never loaded. A page shown again from that cache is reloaded, fresh.
"use strict";

(function () {
  const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
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

  function chart(root) {
    const data = [[], [], []];
    const step = Number(root.dataset.step);
    if (step > 0) {
      data[0].push(step);
      data[1].push(Number(root.dataset.loss));
      data[2].push(Number(root.dataset.lr));
    }
    const where = document.getElementById("chart");
    const plot = new uPlot({
      width: Math.max(320, where.clientWidth || 640), height: 240,
      scales: { x: { time: false }, lr: {} },
      axes: [{ label: "step" }, { label: "loss" },
        { side: 1, scale: "lr", label: "learning rate", size: 70, grid: { show: false } }],
      series: [{ label: "step" }, { label: "loss", stroke: "#0b57d0", width: 2 },
        { label: "learning rate", stroke: "#9b1c1c", scale: "lr", dash: [6, 4], width: 2 }],
    }, data, where);
    return function add(progress) {
      if (!progress.step || (data[0].length && progress.step <= data[0][data[0].length - 1])) return;
      data[0].push(progress.step);
      data[1].push(progress.loss);
      data[2].push(progress.learning_rate);
      plot.setData(data);
      where.dataset.points = String(data[0].length);
      where.dataset.learningRate = String(progress.learning_rate);
    };
  }

  function followEvents(root, add) {
    const rows = document.querySelector("#events-table tbody");
    const source = stream(`/ui/jobs/${root.dataset.jobId}/events`);
    source.addEventListener("phase", (message) => {
      const event = JSON.parse(message.data);
      const row = rows.insertRow();
      for (const text of [moment(event.time), event.from_phase || "-", event.to_phase, event.reason]) {
        row.insertCell().textContent = text;
      }
      htmx.trigger("#live", "refresh");
      if (TERMINAL.has(event.to_phase)) source.close();
    });
    source.addEventListener("progress", (message) => {
      const progress = JSON.parse(message.data).progress;
      if (!progress) return;
      add(progress);
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
