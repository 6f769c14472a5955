// The web console of `cordon serve` in headless Chromium, against the real
// server and real sandboxes (run by `bash .ci/console.sh test`).
//
// An agent (a token, over TCP) makes a sandbox and runs commands in it; the
// owner reaches the console through a TCP port forwarded to the server's
// unix socket (as `ssh -L PORT:/path/to/cordon.sock` would), logs in, and
// sees the sandbox, its timeline and the audit chain's state. The server's
// Cedar policy asks about `echo deploy ...`: the agent's exec of it waits;
// the owner sees the approval pending in the console, chooses the scope,
// clicks Approve, and sees the exec finish (the agent's request answers
// with its output; the timeline shows the approval and the exec's end).
// Then a sandbox whose profile asks about unlisted hosts runs curl to one: the
// exec waits while the sandbox's proxy asks; the owner sees the approval
// pending in the console, chooses the scope, clicks Approve, and sees the
// exec finish (its request answers with curl's output: the proxy went on
// to the host; the timeline shows the approval, the grant and the exec's
// end). Hostile
// checks in the browser: a value with markup stays text (no element, no
// script), a write without the CSRF header is refused, and a page from
// another port of the same host (same-site: the SameSite=Strict cookie is
// sent along) cannot change anything. A screenshot is kept; its path is
// printed.
"use strict";

const assert = require("node:assert/strict");
const { spawn, execFileSync } = require("node:child_process");
const fs = require("node:fs");
const http = require("node:http");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");
const readline = require("node:readline");

const { chromium } = require(process.env.PLAYWRIGHT_CORE || "playwright-core");

const BIN = process.env.CORDON_BIN || path.resolve("target/debug/cordon");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const ARTIFACTS = process.env.CONSOLE_ARTIFACTS || path.resolve("target/console-test");
const REQUIRE_ALL = Boolean(process.env.CORDON_TESTS_REQUIRE_ALL);

function skip(reason) {
  if (REQUIRE_ALL) {
    console.error("required: " + reason);
    process.exit(1);
  }
  console.log("SKIPPED: " + reason);
  process.exit(0);
}

// --- the server -----------------------------------------------------------

function serverEnv(dir) {
  return { ...process.env, CORDON_STATE_DIR: path.join(dir, "state") };
}

/// `cordon serve` on a unix socket and a TCP port; resolves with its
/// first line ({"socket", "listen", "pid"}).
function startServer(dir, flags) {
  const child = spawn(
    BIN,
    ["serve", "--socket", path.join(dir, "cordon.sock"), "--audit", path.join(dir, "audit.db"),
      "--listen", "127.0.0.1:0", ...flags],
    { env: serverEnv(dir), stdio: ["ignore", "pipe", "inherit"] },
  );
  return new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: child.stdout });
    lines.once("line", (line) => resolve({ child, ...JSON.parse(line) }));
    child.once("exit", (code) => reject(new Error("cordon serve exited with " + code)));
  });
}

function makeToken(dir, name, extra) {
  return execFileSync(BIN, ["token", "create", "--name", name, ...(extra || [])], {
    env: serverEnv(dir),
  }).toString().trim();
}

/// A TCP port forwarded to the unix socket (what `ssh -L` does). The
/// request heads that pass are kept in `server.seen`.
function forward(socket) {
  const seen = [];
  const server = net.createServer((client) => {
    const upstream = net.connect(socket);
    client.on("data", (chunk) => {
      const text = chunk.toString("latin1");
      if (/^[A-Z]+ \S+ HTTP\/1\.1\r\n/.test(text)) seen.push(text.split("\r\n\r\n")[0]);
    });
    client.pipe(upstream).pipe(client);
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
  });
  server.seen = seen;
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

/// One API request; `to` is {port} or {socketPath}.
function api(to, method, urlPath, { token, body } = {}) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  const data = body === undefined ? undefined : JSON.stringify(body);
  if (data !== undefined) headers["Content-Type"] = "application/json";
  return new Promise((resolve, reject) => {
    const req = http.request({ host: "127.0.0.1", ...to, method, path: urlPath, headers }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString();
        let json = null;
        try {
          json = JSON.parse(text);
        } catch (_) {
          json = null;
        }
        resolve({ status: res.statusCode, json, text });
      });
    });
    req.on("error", reject);
    if (data !== undefined) req.write(data);
    req.end();
  });
}

function tcpOf(listen) {
  return { port: Number(listen.split(":").pop()) };
}

/// A page served from another port of the same host: it tries to change
/// things on the console's origin with the browser's cookie.
function attackerSite(target) {
  const page = `<!doctype html><title>elsewhere</title><script>
    window.attempts = Promise.allSettled([
      fetch(${JSON.stringify(target + "/ui/logout")}, { method: "POST", credentials: "include", mode: "no-cors" }),
      fetch(${JSON.stringify(target + "/v1/sandboxes")}, { method: "POST", credentials: "include", mode: "no-cors",
        headers: { "Content-Type": "text/plain" }, body: '{"preset":"low"}' }),
    ]).then(() => "done");
  </script>`;
  const server = http.createServer((_, res) => {
    res.writeHead(200, { "Content-Type": "text/html" });
    res.end(page);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

const POLICY = `
@id("ask-deploy")
@ask
@offer("once,session,duration,persistent")
permit(principal, action == Action::"exec", resource)
when { context.program == "echo" && context.argv.contains("deploy") };
`;

// --- the test -------------------------------------------------------------

async function main() {
  if (!fs.existsSync(BIN)) skip("console browser test (no cordon binary at " + BIN + ")");
  if (!fs.existsSync(CHROMIUM)) skip("console browser test (no " + CHROMIUM + ")");
  const doctor = JSON.parse(execFileSync(BIN, ["doctor", "--json"]).toString());
  if (!(doctor.user_namespaces && doctor.user_namespaces.ok)) {
    skip("console browser test (user namespaces are unavailable on this host)");
  }
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cordon-console-"));
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "cordon-console-chromium-"));
  const policy = path.join(dir, "policy.cedar");
  fs.writeFileSync(policy, POLICY);
  const server = await startServer(dir, ["--policy", policy]);
  const cleanup = [];
  cleanup.push(() => new Promise((resolve) => {
    server.child.once("exit", resolve);
    server.child.kill("SIGTERM");
    setTimeout(resolve, 10000);
  }));
  try {
    const agent = makeToken(dir, "agent");
    const tcp = tcpOf(server.listen);

    // The agent makes a sandbox and runs a command whose argv carries markup.
    const created = await api(tcp, "POST", "/v1/sandboxes", { token: agent, body: { preset: "low" } });
    assert.equal(created.status, 201, created.text);
    const id = created.json.id;
    const marker = "<img src=x onerror=window.__xss=1>";
    const ran = await api(tcp, "POST", "/v1/sandboxes/" + id + "/exec", {
      token: agent,
      body: { argv: ["sh", "-c", "echo console-test", marker] },
    });
    assert.equal(ran.status, 200, ran.text);
    assert.equal(ran.json.exit_code, 0, ran.text);
    assert.equal(ran.json.stdout, "console-test\n");

    const fwd = await forward(server.socket);
    cleanup.push(() => fwd.close());
    const origin = "http://127.0.0.1:" + fwd.address().port;

    // A fresh profile directory (--user-data-dir) for this run.
    const context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1280, height: 900 },
      args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    });
    cleanup.push(() => context.close());
    const page = await context.newPage();
    const pageErrors = [];
    page.on("pageerror", (e) => pageErrors.push(String(e)));
    // Refused requests (the 403 below is made on purpose) are not script
    // errors; anything else logged as an error is.
    page.on("console", (m) => {
      if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) pageErrors.push(m.text());
    });

    // Not logged in: the login page. The owner logs in with no token.
    await page.goto(origin + "/ui");
    assert.equal(new URL(page.url()).pathname, "/ui/login");
    await page.getByLabel("API token").fill("");
    await page.getByRole("button", { name: "Log in" }).click();
    await page.waitForURL(origin + "/ui");
    await page.locator("#who", { hasText: "owner" }).waitFor();
    const cookies = await context.cookies();
    const cookie = cookies.find((c) => c.name === "cordon_console");
    assert.ok(cookie, "the console cookie is set");
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, "Strict");
    assert.equal(await page.evaluate(() => document.cookie), "", "the page's script cannot read the cookie");

    // The agent's sandbox, live, with its usage.
    const row = page.locator("#sandboxes-body tr[data-id='" + id + "']");
    await row.waitFor();
    assert.match(await row.innerText(), /running/);
    assert.match(await row.innerText(), /agent/);

    // Its timeline, opened from the keyboard: the exec and its end.
    await page.getByRole("button", { name: "Show the timeline of sandbox " + id }).focus();
    await page.keyboard.press("Enter");
    const timeline = page.locator("#timeline-list");
    await timeline.locator("li[data-kind='exec']", { hasText: "echo console-test" }).waitFor();
    await timeline.locator("li", { hasText: /exec pid \d+ ended: exit 0/ }).waitFor();
    // The markup in the argv is shown as text: no element was made of it,
    // no script ran.
    await timeline.locator("li[data-kind='exec']", { hasText: marker }).waitFor();
    assert.equal(await page.locator("#timeline-list img").count(), 0);
    assert.equal(await page.evaluate(() => window.__xss), undefined);

    // The audit chain's state.
    await page.locator("#audit-status.verify-ok", { hasText: "Chain intact" }).waitFor();

    // A write from the page without the CSRF header is refused.
    const bare = await page.evaluate(async () => {
      const r = await fetch("/v1/sandboxes", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ preset: "low" }) });
      return { status: r.status, body: await r.json() };
    });
    assert.equal(bare.status, 403, JSON.stringify(bare));
    assert.equal(bare.body.error.code, "csrf");

    // A page on another port of this host (same-site: the cookie goes
    // along) tries to log the console out and to make a sandbox.
    const before = (await api({ socketPath: server.socket }, "GET", "/v1/sandboxes")).json.sandboxes.length;
    const evil = await attackerSite(origin);
    cleanup.push(() => evil.close());
    const other = await context.newPage();
    await other.goto("http://127.0.0.1:" + evil.address().port + "/");
    assert.equal(await other.evaluate(() => window.attempts), "done");
    await other.close();
    // Both reached the server with the cookie: SameSite does not stop
    // them (another port is the same site); the server refused them.
    const attempts = fwd.seen.filter((h) => /Sec-Fetch-Site: same-site/i.test(h));
    assert.equal(attempts.length, 2, fwd.seen.join("\n---\n"));
    for (const h of attempts) assert.match(h, /Cookie: cordon_console=/i);
    const after = (await api({ socketPath: server.socket }, "GET", "/v1/sandboxes")).json.sandboxes.length;
    assert.equal(after, before, "no sandbox was made from the other page");
    const still = await page.evaluate(async () => (await fetch("/ui/session")).status);
    assert.equal(still, 200, "the console session survived the other page's logout");

    // The agent's deploy waits on a human (the policy's @ask rule).
    let deployed = false;
    const deploy = api(tcp, "POST", "/v1/sandboxes/" + id + "/exec", {
      token: agent,
      body: { argv: ["echo", "deploy", "now"] },
    }).then((r) => {
      deployed = true;
      return r;
    });
    const deployCard = page.locator("#approvals-list li.card", { hasText: "echo deploy now" });
    await deployCard.waitFor({ timeout: 30000 });
    assert.equal(deployed, false, "the exec waits for its approval");
    assert.match(await deployCard.innerText(), /agent/);
    assert.match(await deployCard.innerText(), /ask-deploy/);
    await page.screenshot({ path: path.join(ARTIFACTS, "console-pending.png"), fullPage: true });
    await deployCard.getByLabel("Scope").selectOption("once");
    await deployCard.getByRole("button", { name: /^Approve/ }).click();
    const ranDeploy = await deploy;
    assert.equal(ranDeploy.status, 200, ranDeploy.text);
    assert.equal(ranDeploy.json.exit_code, 0, ranDeploy.text);
    assert.equal(ranDeploy.json.stdout, "deploy now\n");
    await deployCard.waitFor({ state: "detached" });
    await timeline.locator("li[data-kind='approval']", { hasText: "approved by owner: exec echo deploy now" }).waitFor();
    await timeline.locator("li[data-kind='exec']", { hasText: "exec echo deploy now" }).waitFor();
    await page.waitForFunction(() =>
      [...document.querySelectorAll("#timeline-list li")].filter((li) => /ended: exit 0/.test(li.textContent)).length >= 2);

    // A sandbox whose proxy asks about unlisted hosts; curl to one waits
    // on a human. (The name never resolves: once allowed, the proxy tries
    // it and answers 502; refused, it would answer 403.)
    const unix = { socketPath: server.socket };
    const asking = await api(unix, "POST", "/v1/sandboxes", {
      body: { profile: { extends: "low", network: { mode: "proxy", on_unlisted: "ask" } } },
    });
    assert.equal(asking.status, 201, asking.text);
    const askId = asking.json.id;
    let answered = false;
    const curl = api(unix, "POST", "/v1/sandboxes/" + askId + "/exec", {
      body: { argv: ["sh", "-c", "curl -s -m 60 -o /dev/null -w '%{http_code}' http://console-test.invalid/; echo; echo done"] },
    }).then((r) => {
      answered = true;
      return r;
    });
    const card = page.locator("#approvals-list li.card", { hasText: "console-test.invalid:80" });
    await card.waitFor({ timeout: 30000 });
    assert.equal(answered, false, "the exec waits for its approval");
    assert.match(await card.innerText(), /on_unlisted=ask/);
    await page.locator("#status", { hasText: "Waiting for a decision" }).waitFor();
    await card.getByLabel("Scope").selectOption("once");
    await card.getByRole("button", { name: /^Approve/ }).click();
    const done = await curl;
    assert.equal(done.status, 200, done.text);
    assert.equal(done.json.exit_code, 0, done.text);
    assert.equal(done.json.stdout, "502\ndone\n", "the proxy went on to the host once approved");
    await card.waitFor({ state: "detached" });
    await page.locator("#status", { hasText: "Approved console-test.invalid:80 (once)" }).waitFor();
    // Its timeline: the question, the answer, the grant, the exec's end.
    await page.getByRole("button", { name: "Show the timeline of sandbox " + askId }).click();
    for (const text of [
      "approval asked: egress console-test.invalid:80",
      "approval approved by owner: egress console-test.invalid:80 (scope once)",
      "grant ended (used): egress console-test.invalid:80",
    ]) {
      await timeline.locator("li[data-kind='approval']", { hasText: text }).waitFor();
    }
    await timeline.locator("li[data-kind='exec']", { hasText: /exec pid \d+ ended: exit 0/ }).waitFor();

    const shot = path.join(ARTIFACTS, "console.png");
    await page.screenshot({ path: shot, fullPage: true });
    console.log("screenshot: " + shot);

    // Logout ends the session.
    await page.getByRole("button", { name: "Log out" }).click();
    await page.waitForURL(origin + "/ui/login");
    const gone = await page.evaluate(async () => (await fetch("/ui/session")).status);
    assert.equal(gone, 401);

    assert.deepEqual(pageErrors, [], "no script errors in the console");
    console.log("console browser test: ok");
  } finally {
    for (const f of cleanup.reverse()) {
      try {
        await f();
      } catch (_) {
        // Best effort: the next step still runs.
      }
    }
    for (const d of [profile, dir]) {
      try {
        fs.rmSync(d, { recursive: true, force: true });
      } catch (e) {
        console.error("cannot remove " + d + ": " + e.message);
      }
    }
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
