// Read a JSON lines log, count events per type and hour, write a report.
'use strict';

const fs = require('fs');
const path = require('path');
const readline = require('readline');

function hourOf(ts) {
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) ? 'unknown' : d.toISOString().slice(0, 13);
}

async function count(file) {
  const counts = new Map();
  const rl = readline.createInterface({ input: fs.createReadStream(file), crlfDelay: Infinity });
  let bad = 0;
  for await (const line of rl) {
    if (!line.trim()) continue;
    let event;
    try {
      event = JSON.parse(line);
    } catch {
      bad += 1;
      continue;
    }
    const key = `${event.type || 'none'}\t${hourOf(event.time)}`;
    counts.set(key, (counts.get(key) || 0) + 1);
  }
  return { counts, bad };
}

function render({ counts, bad }) {
  const rows = [...counts.entries()].sort((a, b) => b[1] - a[1]);
  const lines = rows.map(([key, n]) => `${key}\t${n}`);
  if (bad) lines.push(`# ${bad} malformed lines skipped`);
  return lines.join('\n') + '\n';
}

async function main() {
  const [input, output = 'out/report.tsv'] = process.argv.slice(2);
  if (!input) {
    console.error('usage: node report.js EVENTS.jsonl [OUT.tsv]');
    process.exit(2);
  }
  const result = await count(input);
  fs.mkdirSync(path.dirname(output), { recursive: true });
  fs.writeFileSync(output, render(result));
  console.log(`${result.counts.size} groups written to ${output}`);
}

main();
