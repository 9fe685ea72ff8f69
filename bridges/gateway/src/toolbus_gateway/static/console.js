// The console's only script: refresh panels when the server says they changed,
// keep announcement ages and approvals' waits ticking, and filter the tools table in place.
"use strict";

const refreshes = JSON.parse(document.querySelector("main").dataset.refreshes);
const pending = new Set();
let timer = null;

async function refresh(name) {
  const target = document.getElementById(name);
  if (!target) return;
  const response = await fetch(`/console/fragments/${name}`, { credentials: "same-origin" });
  if (!response.ok) return;
  target.innerHTML = await response.text();
  if (name === "tools") applyFilter();
  tickAges();
}

// Bursts of events (a busy minute of calls) become one fetch per panel per half second.
function schedule(names) {
  names.forEach((name) => pending.add(name));
  if (timer !== null) return;
  timer = setTimeout(() => {
    const names = [...pending];
    pending.clear();
    timer = null;
    names.forEach(refresh);
  }, 500);
}

function connect() {
  const events = new EventSource("/console/events");
  for (const [event, panels] of Object.entries(refreshes)) {
    events.addEventListener(event, () => schedule(panels));
  }
  events.addEventListener("hello", () => document.body.classList.add("live"));
  events.onerror = () => document.body.classList.remove("live");
}

// As the server writes durations (console.py's human_seconds): 42 s, 4 m 59 s, 2 h 5 m.
function human(seconds) {
  const whole = Math.max(0, Math.floor(seconds));
  if (whole < 60) return `${whole} s`;
  if (whole < 3600) return `${Math.floor(whole / 60)} m ${whole % 60} s`;
  return `${Math.floor(whole / 3600)} h ${Math.floor((whole % 3600) / 60)} m`;
}

function tickAges() {
  const now = Date.now();
  document.querySelectorAll("td.age[data-heard]").forEach((cell) => {
    const seconds = Math.max(0, Math.round((now - Number(cell.dataset.heard)) / 1000));
    cell.textContent = `${seconds} s ago`;
  });
  document.querySelectorAll("#approvals [data-since]").forEach((cell) => {
    cell.textContent = `(${human((now - Number(cell.dataset.since)) / 1000)})`;
  });
  document.querySelectorAll("#approvals [data-expires]").forEach((cell) => {
    const left = (Number(cell.dataset.expires) - now) / 1000;
    cell.textContent = left > 0 ? human(left) : "expired";
  });
}

function applyFilter() {
  const input = document.getElementById("tool-filter");
  const needle = input ? input.value.trim().toLowerCase() : "";
  document.querySelectorAll("#tools details.group").forEach((group) => {
    let shown = 0;
    group.querySelectorAll("tr[data-tool]").forEach((row) => {
      const match = !needle || row.dataset.tool.toLowerCase().includes(needle);
      row.hidden = !match;
      if (match) shown += 1;
    });
    group.hidden = shown === 0;
    if (needle && shown > 0) group.open = true;
  });
}

document.getElementById("tool-filter")?.addEventListener("input", applyFilter);
setInterval(tickAges, 1000);
connect();
