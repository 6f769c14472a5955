// The cordon console: reads the /v1 API with the session cookie and sends
// the session's CSRF token on every request that changes something. Every
// value from the server is put into the page as text (textContent), never
// as markup.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  let csrf = "";
  let selected = null; // the sandbox whose timeline is shown
  let approvalsAvailable = true;
  const approvals = new Map(); // id -> approval, pending only

  // --- small helpers ---------------------------------------------------

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = String(v);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) {
      if (c === undefined || c === null) continue;
      node.append(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return node;
  }

  function say(text, bad) {
    const s = $("status");
    s.textContent = text;
    s.classList.toggle("error", Boolean(bad));
  }

  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    if (method !== "GET") headers["X-CSRF-Token"] = csrf;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const r = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
      cache: "no-store",
    });
    if (r.status === 401) {
      window.location.assign("/ui/login");
      throw new Error("the console session has ended");
    }
    let data = null;
    try {
      data = await r.json();
    } catch (_) {
      data = null;
    }
    return { status: r.status, ok: r.ok, data };
  }

  function errorText(res) {
    const e = res.data && res.data.error;
    if (e && typeof e === "object") return e.message + (e.fix ? " (" + e.fix + ")" : "");
    if (e && res.data.message) return res.data.message;
    return "HTTP " + res.status;
  }

  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i += 1;
    }
    return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
  }

  function when(ms) {
    if (!ms) return "";
    return new Date(ms).toLocaleTimeString();
  }

  function timeOf(value) {
    if (typeof value === "number") return value > 1e14 ? value / 1e6 : value; // ns or ms
    const t = Date.parse(value);
    return Number.isNaN(t) ? 0 : t;
  }

  // --- sandboxes -------------------------------------------------------

  async function refreshSandboxes() {
    const res = await api("GET", "/v1/sandboxes");
    if (!res.ok) {
      say("Cannot list the sandboxes: " + errorText(res), true);
      return;
    }
    const list = (res.data && res.data.sandboxes) || [];
    const focusedId = document.activeElement && document.activeElement.dataset
      ? document.activeElement.dataset.sandbox
      : undefined;
    const body = $("sandboxes-body");
    body.replaceChildren(...list.map(sandboxRow));
    $("sandboxes-table").hidden = list.length === 0;
    $("sandboxes-empty").hidden = list.length !== 0;
    if (focusedId) {
      const again = body.querySelector("button[data-sandbox='" + CSS.escape(focusedId) + "']");
      if (again) again.focus();
    }
  }

  function sandboxRow(s) {
    const u = s.usage || {};
    const l = s.limits || {};
    const cpu = u.cpu_usec === null || u.cpu_usec === undefined ? "–" : (u.cpu_usec / 1e6).toFixed(2) + " s";
    const mem = bytes(u.memory_bytes) + (l.memory_bytes ? " / " + bytes(l.memory_bytes) : "");
    const button = el("button", {
      type: "button",
      "data-sandbox": s.id,
      "aria-label": "Show the timeline of sandbox " + s.id,
      onclick: () => showTimeline(s.id),
      text: "Show",
    });
    return el(
      "tr",
      { "data-id": s.id },
      el("td", {}, el("code", { text: s.id })),
      el("td", { class: "state-" + s.state, text: s.state + (s.ended ? " (" + s.ended + ")" : "") }),
      el("td", { text: s.owner }),
      el("td", { text: s.preset }),
      el("td", { class: "num", text: mem }),
      el("td", { class: "num", text: cpu }),
      el("td", { class: "num", text: u.pids === null || u.pids === undefined ? "–" : String(u.pids) }),
      el("td", { class: "num", text: (u.execs_running || 0) + " running / " + (u.execs_total || 0) }),
      el("td", {}, button),
    );
  }

  // --- timeline --------------------------------------------------------

  async function showTimeline(id) {
    selected = id;
    await refreshTimeline();
    $("timeline-h").textContent = "Timeline of " + id;
    $("timeline").scrollIntoView({ block: "nearest" });
  }

  async function refreshTimeline() {
    if (!selected) return;
    const res = await api("GET", "/v1/sandboxes/" + encodeURIComponent(selected) + "/timeline");
    if (!res.ok) {
      say("Cannot read the timeline: " + errorText(res), true);
      return;
    }
    const entries = (res.data && res.data.entries) || [];
    $("timeline-list").replaceChildren(
      ...entries.map((e) =>
        el(
          "li",
          { "data-kind": e.category },
          el("time", { datetime: e.time, text: when(timeOf(e.time)) }),
          el("span", { class: "tag " + e.category, text: e.category }),
          el("span", { class: "mono", text: e.summary }),
        ),
      ),
    );
    $("timeline-empty").hidden = entries.length !== 0;
    $("timeline-empty").textContent = "Nothing recorded for this sandbox yet.";
  }

  // --- approvals -------------------------------------------------------

  function subjectText(s) {
    if (s === null || s === undefined) return "";
    if (typeof s !== "object") return String(s);
    let kind = s.kind;
    let v = s;
    if (!kind) {
      const keys = Object.keys(s);
      if (keys.length === 1 && s[keys[0]] && typeof s[keys[0]] === "object") {
        kind = keys[0];
        v = s[kind];
      }
    }
    switch (kind) {
      case "exec":
        return (v.argv_prefix || v.argv || []).join(" ");
      case "egress":
        return v.host + ":" + v.port;
      case "path":
        return v.path + (v.writable ? " (write)" : " (read)");
      case "bind":
        return v.host_path + (v.writable ? " (writable)" : " (read-only)");
      case "limits":
        return "memory " + bytes(v.memory) + ", pids " + (v.pids ?? "–");
      case "secret":
        return v.name;
      case "tool":
        return v.server + " / " + v.tool;
      case "create":
        return "profile " + v.profile;
      case "promote":
        return "run " + v.run;
      default:
        return JSON.stringify(s);
    }
  }

  function expiry(a) {
    const at = a.expires_unix_ms ?? a.expires_at;
    return at ? when(timeOf(at)) : "–";
  }

  async function refreshApprovals() {
    if (!approvalsAvailable) return;
    const res = await api("GET", "/v1/approvals?state=pending");
    if (res.status === 404 || res.status === 405) {
      approvalsAvailable = false;
      $("approvals-empty").textContent = "This server has no approvals API.";
      return;
    }
    if (!res.ok) {
      say("Cannot list the approvals: " + errorText(res), true);
      return;
    }
    approvals.clear();
    for (const a of (res.data && res.data.approvals) || []) approvals.set(a.id, a);
    renderApprovals();
  }

  function renderApprovals() {
    const list = $("approvals-list");
    for (const card of [...list.children]) {
      if (!approvals.has(card.dataset.id)) card.remove();
    }
    for (const a of approvals.values()) {
      if (!list.querySelector("li[data-id='" + CSS.escape(a.id) + "']")) {
        list.append(approvalCard(a));
        say("Waiting for a decision: " + (a.kind || "action") + " " + subjectText(a.subject) + ".");
      }
    }
    $("approvals-empty").hidden = approvals.size !== 0;
  }

  function approvalCard(a) {
    const subject = subjectText(a.subject);
    const scopeId = "scope-" + a.id;
    const durId = "duration-" + a.id;
    const offers = a.offers && a.offers.length ? a.offers : ["once"];
    const scope = el("select", { id: scopeId, name: "scope" },
      ...offers.map((o) => el("option", { value: o, text: o })));
    const duration = el("input", { id: durId, name: "duration", value: "10m", size: "6" });
    const durLabel = el("label", { for: durId, text: "For" });
    const durationShown = () => {
      const on = scope.value === "duration";
      duration.hidden = !on;
      durLabel.hidden = !on;
    };
    scope.addEventListener("change", durationShown);
    durationShown();
    const note = el("p", { class: "help", role: "status" });
    const rule = a.rule ? a.rule.id + " (" + a.rule.file + ":" + a.rule.line + ")" : "";
    const card = el(
      "li",
      { class: "card", "data-id": a.id },
      el("h3", {}, el("span", { text: (a.kind || "action") + ": " }), el("code", { text: subject })),
      el(
        "dl",
        {},
        el("dt", { text: "Sandbox" }), el("dd", { text: a.session || "–" }),
        el("dt", { text: "Asked by" }), el("dd", { text: a.principal || "–" }),
        el("dt", { text: "Reason" }), el("dd", { text: a.reason || "–" }),
        el("dt", { text: "Risk" }), el("dd", { text: (a.risk || []).join(", ") || "none found" }),
        el("dt", { text: "Rule" }), el("dd", { text: rule || "–" }),
        el("dt", { text: "A longer grant covers" }), el("dd", { text: a.grant_subject ? subjectText(a.grant_subject) : subject }),
        el("dt", { text: "Expires" }), el("dd", { text: expiry(a) }),
      ),
      el(
        "div",
        { class: "actions" },
        el("label", { for: scopeId, text: "Scope" }),
        scope,
        durLabel,
        duration,
        el("button", {
          type: "button", class: "approve", text: "Approve",
          "aria-label": "Approve " + (a.kind || "") + " " + subject,
          onclick: () => decide(a, card, { decision: "approve", scope: scope.value, duration: duration.value }),
        }),
        el("button", {
          type: "button", class: "deny", text: "Deny",
          "aria-label": "Deny " + (a.kind || "") + " " + subject,
          onclick: () => decide(a, card, { decision: "deny" }),
        }),
      ),
      note,
    );
    card.note = note;
    return card;
  }

  async function decide(a, card, answer) {
    const body = { decision: answer.decision };
    if (answer.decision === "approve") {
      body.scope = answer.scope;
      if (answer.scope === "duration") body.duration = answer.duration;
      if (answer.confirm) body.confirm = answer.confirm;
    }
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    const res = await api("POST", "/v1/approvals/" + encodeURIComponent(a.id), body);
    for (const b of card.querySelectorAll("button")) b.disabled = false;
    if (res.status === 409 && res.data && res.data.confirm) {
      confirmPersistent(a, card, answer, res.data);
      return;
    }
    if (!res.ok) {
      card.note.textContent = "Not decided: " + errorText(res);
      card.note.classList.add("error");
      return;
    }
    approvals.delete(a.id);
    renderApprovals();
    say((answer.decision === "approve" ? "Approved " : "Denied ") + subjectText(a.subject) +
      (body.scope ? " (" + body.scope + ")" : "") + ".");
    refreshSandboxes();
    refreshTimeline();
  }

  function confirmPersistent(a, card, answer, reply) {
    card.note.replaceChildren(
      el("span", { text: "A persistent grant adds this rule to the policy file:" }),
      el("pre", { class: "mono", text: reply.rule || "" }),
      el("button", {
        type: "button", class: "approve", text: "Add the rule and approve",
        onclick: () => decide(a, card, { ...answer, confirm: reply.confirm }),
      }),
    );
    card.note.querySelector("button").focus();
  }

  function followApprovals() {
    if (!approvalsAvailable || typeof EventSource === "undefined") return;
    const events = new EventSource("/v1/approvals/events");
    events.addEventListener("approval", (ev) => {
      let a;
      try {
        a = JSON.parse(ev.data);
      } catch (_) {
        return;
      }
      if (a.state === "pending") approvals.set(a.id, a);
      else approvals.delete(a.id);
      renderApprovals();
    });
    events.onerror = () => {
      // The browser reconnects by itself; the poll below covers the gap.
    };
  }

  // --- audit -----------------------------------------------------------

  async function verify() {
    const out = $("audit-status");
    out.className = "";
    out.textContent = "Checking…";
    const res = await api("GET", "/v1/audit/verify");
    if (!res.ok) {
      out.textContent = "Cannot verify: " + errorText(res);
      out.className = "verify-bad";
      return;
    }
    const r = res.data;
    if (!r.enabled) {
      out.textContent = "Auditing is off on this server.";
      return;
    }
    const head = r.head_seq ? " up to seq " + r.head_seq : "";
    if (r.ok) {
      out.textContent = "Chain intact: " + r.records + " records" + head + ", checked " + when(timeOf(r.checked_unix_ms)) + ".";
      out.className = "verify-ok";
    } else {
      const first = (r.problems || [])[0];
      out.textContent = "Chain broken: " + (first ? (first.seq ? "seq " + first.seq + ": " : "") + first.what : "see cordon audit verify");
      out.className = "verify-bad";
    }
  }

  // --- start -----------------------------------------------------------

  async function logout() {
    await api("POST", "/ui/logout");
    window.location.assign("/ui/login");
  }

  async function tick() {
    try {
      await Promise.all([refreshSandboxes(), refreshApprovals(), refreshTimeline()]);
    } catch (e) {
      say(String(e.message || e), true);
    }
  }

  async function start() {
    const res = await api("GET", "/ui/session");
    if (!res.ok) {
      say("Cannot read the console session: " + errorText(res), true);
      return;
    }
    csrf = res.data.csrf;
    $("who").textContent = res.data.name + (res.data.approver ? "" : " (cannot answer other tokens' approvals)");
    $("logout").addEventListener("click", logout);
    $("verify").addEventListener("click", verify);
    await tick();
    followApprovals();
    verify();
    setInterval(tick, 2000);
    setInterval(verify, 30000);
  }

  start();
})();
