#!/usr/bin/env node
/*
 * locklab driver adapter for node-postgres's pool (pg's `Pool`, i.e. pg-pool).
 *
 * Speaks locklab's driver protocol, version 1 (docs/src/protocol.md): one JSON
 * object per line on stdin (requests) and stdout (answers), several requests
 * in flight at once, each answered by its `id`. Diagnostics go to stderr.
 *
 * usage: node adapter.js [NAME [CONFIG]]
 *   NAME: the install set, default pg-8.14
 *   CONFIG: defaults (default) | release-unlock-all
 *   pg is loaded from <workspace>/.cache/node/NAME/node_modules (made by
 *   install.sh NAME; LOCKLAB_NODE_MODULES overrides the directory). It is
 *   required by absolute path: pg's own require('pg-pool') etc. then resolve
 *   by Node's node_modules lookup next to it, so no NODE_PATH is needed (a
 *   columns entry sets no environment).
 *
 * "Defaults": new pg.Pool({connection parameters, max: max_size,
 * connectionTimeoutMillis: checkout_timeout_ms}) and pg-pool's defaults
 * otherwise: no minimum size (connections are opened on demand), idle
 * connections closed after idleTimeoutMillis = 10000, no maxUses, no
 * maxLifetimeSeconds. client.release() does no clean-up at all (pg-pool
 * index.js _release: the client goes to the idle list as it is, open
 * transaction, session locks, a statement still running and all); pg sends
 * no BEGIN of its own (autocommit). Checkout is the documented
 * `const client = await pool.connect(); try { … } finally { client.release() }`.
 *
 * "release-unlock-all": the same, with the application's release handler
 * running `await client.query('select pg_advisory_unlock_all()')` before
 * `client.release()` (pg-pool has no reset hook of its own: the 'release'
 * event fires after the client is back in the idle list, too late to clean
 * it before the next checkout), bounded by a 1 s query_timeout (behind a
 * given-up statement still running on the client the unlock queues and
 * would wait as long as it). A failed or timed-out unlock releases the
 * client with the error, so pg-pool destroys it (pg-pool index.js _release).
 *
 * Giving up on a call, node-postgres's way (nothing of the adapter's own is
 * sent to the server):
 * - query `timeout_ms`: pg's per-query `query_timeout` (client.js query()):
 *   the promise rejects with "Query read timeout" and pg stops waiting; it
 *   sends no cancel request, the statement keeps running on the server and
 *   stays the connection's activeQuery (later queries queue behind it).
 * - `drop`: a promise cannot be interrupted; the caller stops awaiting it
 *   (answered `dropped` at once); the call goes on. A checkout granted after
 *   it was given up is released at once.
 * - `abandon`: the `finally { client.release() }` of the owner: released at
 *   once, even with the given-up statement still running on it.
 * - `cancel`: pg 8.14 has no documented cancel API; the undocumented
 *   Client.prototype.cancel(client, query) (client.js), what pg.cancel used
 *   to call before 7.0, sends the protocol's CancelRequest from a fresh
 *   connection: `new pg.Client(config).cancel(client, client.activeQuery)`.
 */
'use strict'

const fs = require('fs')
const path = require('path')
const readline = require('readline')
const { performance } = require('perf_hooks')

const PROTOCOL = 1
const NAME = process.argv[2] || 'pg-8.14'
const CONFIG = process.argv[3] || 'defaults'
const UNLOCK_BOUND_MS = 1000
if (!['defaults', 'release-unlock-all'].includes(CONFIG)) {
  process.stderr.write(`adapter: unknown configuration '${CONFIG}' (defaults | release-unlock-all)\n`)
  process.exit(2)
}
const ROOT = path.resolve(__dirname, '..', '..', '..')
const MODULES = process.env.LOCKLAB_NODE_MODULES || path.join(ROOT, '.cache', 'node', NAME, 'node_modules')

function log(...parts) {
  process.stderr.write(`adapter: ${parts.join(' ')}\n`)
}

let pg, pgVersion, poolVersion, debs
try {
  pg = require(path.join(MODULES, 'pg'))
  pgVersion = require(path.join(MODULES, 'pg', 'package.json')).version
  poolVersion = require(path.join(MODULES, 'pg-pool', 'package.json')).version
} catch (e) {
  log(`cannot load node-postgres from ${MODULES} (run drivers/adapters/node/install.sh ${NAME}): ${e.message.split('\n')[0]}`)
  process.exit(1)
}
try {
  debs = fs.readFileSync(path.join(MODULES, '..', 'debs.txt'), 'utf8').trim().split('\n').join(', ')
} catch (e) {
  debs = ''
}

// Values as the server sent them (PostgreSQL's text format): no parsing.
const TEXT_TYPES = { getTypeParser: () => (value) => value }

class Failure extends Error {
  constructor(kind, message, sqlstate) {
    super(message)
    this.kind = kind
    this.sqlstate = sqlstate
  }
}

function failureOf(e) {
  if (e instanceof Failure) return e
  if (e instanceof pg.DatabaseError && e.code) return new Failure('db', e.message, e.code)
  return new Failure('client', (e && e.message) || String(e))
}

const pools = new Map() // pool id -> {pool, config, clients: Set of live clients, removed: WeakSet}
const conns = new Map() // conn id -> {poolId, client}
const inflight = new Map() // request id -> request state (see handle)
const connCalls = new Map() // conn id -> request state of its call in flight
const watched = new WeakSet() // clients with our error listener

function send(msg) {
  process.stdout.write(JSON.stringify(msg) + '\n')
}

function poolOf(id) {
  const p = pools.get(id)
  if (!p) throw new Failure('protocol', `no pool '${id}'`)
  return p
}

function connOf(id) {
  const c = conns.get(id)
  if (!c) throw new Failure('protocol', `no checked-out connection '${id}'`)
  return c
}

function startupOptions(options) {
  // `-c name=value` each; backslash-escape spaces and backslashes (the
  // startup packet's options syntax).
  return options.map(([k, v]) => `-c ${k}=${String(v).replace(/\\/g, '\\\\').replace(/ /g, '\\ ')}`).join(' ')
}

function opHello() {
  return {
    protocol: PROTOCOL,
    library: 'pg',
    version: pgVersion,
    details: `pg-pool ${poolVersion}, node ${process.version}` + (debs ? ` (Debian ${debs})` : ''),
    pid: process.pid,
    cancel: true,
    no_cancel_reason: '',
  }
}

function opOpenPool(req) {
  const spec = req.spec
  const config = {
    host: spec.host,
    port: spec.port,
    user: spec.user,
    database: spec.dbname,
    application_name: spec.application_name,
  }
  if (spec.password != null) config.password = spec.password
  if (spec.options && spec.options.length) config.options = startupOptions(spec.options)
  const pool = new pg.Pool({ ...config, max: req.max_size, connectionTimeoutMillis: req.checkout_timeout_ms })
  const entry = { pool, config, clients: new Set(), removed: new WeakSet() }
  // An application must listen: an idle client's error (its backend
  // terminated) is re-emitted by the pool, and would end the process unheard.
  pool.on('error', (err) => log(`pool ${req.pool}: idle client error: ${err.message}`))
  pool.on('connect', (client) => {
    entry.clients.add(client)
    client.once('end', () => entry.clients.delete(client))
  })
  pool.on('remove', (client) => entry.removed.add(client))
  pools.set(req.pool, entry)
  return {}
}

/**
 * Runs `f` once `ms` have elapsed, never before: a libuv timer counts from
 * the event loop's cached time, which may lag the clock by a millisecond,
 * so `setTimeout(f, 300)` can fire after 299 ms (seen: a checkout bound
 * given up "after 299 ms, before its bound of 300 ms"). Re-armed for the
 * rest when it fires early; the live timer is kept in `state.timer`.
 */
function atLeast(ms, f, state) {
  const start = performance.now()
  const arm = (wait) =>
    setTimeout(() => {
      const left = ms - (performance.now() - start)
      if (left > 0) state.timer = arm(Math.ceil(left))
      else f()
    }, wait)
  return arm(ms)
}

async function opCheckout(req, state) {
  const p = poolOf(req.pool)
  if (p.pool.options.connectionTimeoutMillis !== req.checkout_timeout_ms) {
    // A checkout bound other than open_pool's: still the pool's own checkout
    // timeout, which connect() reads from its options at each call.
    p.pool.options.connectionTimeoutMillis = req.checkout_timeout_ms
  }
  const pending = p.pool.connect()
  if (req.timeout_ms != null) {
    state.timer = atLeast(req.timeout_ms, () => state.answer({ ok: { gave_up: true } }), state)
  }
  let client
  try {
    client = await pending
  } finally {
    clearTimeout(state.timer)
  }
  if (state.answered) {
    // Given up (timeout_ms or drop) before the pool granted it: the
    // application never got it, so it goes straight back.
    client.release()
    return undefined
  }
  if (!watched.has(client)) {
    // A checked-out client has no pool listener: without one of ours, an
    // error outside a query (its backend terminated) would end the process.
    watched.add(client)
    client.on('error', (err) => log(`client (backend ${client.processID}): ${err.message}`))
  }
  conns.set(req.conn, { poolId: req.pool, client })
  return { pid: client.processID }
}

function resultOf(res) {
  const results = Array.isArray(res) ? res : [res]
  let columns = []
  const rows = []
  for (const r of results) {
    if (r.fields && r.fields.length) columns = r.fields.map((f) => f.name)
    for (const row of r.rows) rows.push(row)
  }
  return { columns, rows }
}

async function opQuery(req, state, sql) {
  const { client } = connOf(req.conn)
  connCalls.set(req.conn, state)
  const notices = []
  const onNotice = (msg) => notices.push(`${msg.severity}: ${msg.message}`)
  client.on('notice', onNotice)
  const query = { text: sql === undefined ? req.sql : sql, rowMode: 'array', types: TEXT_TYPES }
  if (req.timeout_ms != null) query.query_timeout = req.timeout_ms
  const t0 = performance.now()
  try {
    // No values: the simple query protocol (one Query message), so `sql`
    // may hold several statements, which the server runs as one implicit
    // transaction (PostgreSQL docs §55.2.2.1, "Multiple Statements in a
    // Simple Query"), and pg returns one Result per statement.
    const res = await client.query(query)
    return { ...resultOf(res), notices, elapsed_ms: performance.now() - t0 }
  } catch (e) {
    const elapsed = performance.now() - t0
    if (req.timeout_ms != null && !(e instanceof pg.DatabaseError) && e.message === 'Query read timeout') {
      return { gave_up: true, elapsed_ms: elapsed }
    }
    const f = failureOf(e)
    f.elapsed_ms = elapsed
    throw f
  } finally {
    client.removeListener('notice', onNotice)
    if (connCalls.get(req.conn) === state) connCalls.delete(req.conn)
  }
}

function opTransaction(req, state) {
  // pg has no transaction API: the statements, as its documentation does.
  return opQuery(req, state, req.op)
}

async function opReturn(req) {
  const c = connOf(req.conn)
  const p = poolOf(c.poolId)
  conns.delete(req.conn)
  let failed
  if (CONFIG === 'release-unlock-all') {
    try {
      // Bounded: behind a given-up statement still running on the client
      // (it queues behind it) the unlock would wait as long as that does.
      await c.client.query({ text: 'select pg_advisory_unlock_all()', query_timeout: UNLOCK_BOUND_MS })
    } catch (e) {
      failed = e
    }
  }
  // Synchronous: pg-pool has taken it back (or removed it) when this returns.
  c.client.release(failed)
  return { returned: p.removed.has(c.client) ? 'closed' : 'to_pool' }
}

function opCancel(req) {
  const c = connOf(req.conn)
  const query = c.client.activeQuery
  if (!query) return {}
  const p = pools.get(c.poolId)
  const canceller = new pg.Client(p ? p.config : {})
  return new Promise((resolve) => {
    const con = canceller.connection
    let done = false
    const finish = () => {
      if (!done) {
        done = true
        clearTimeout(timer)
        resolve({})
      }
    }
    // Answered once the server has taken the CancelRequest (it closes the
    // connection after reading it).
    const timer = setTimeout(() => {
      log(`cancel ${req.conn}: the cancel connection did not close within 5 s`)
      con.stream.destroy()
      finish()
    }, 5000)
    con.on('error', (err) => {
      log(`cancel ${req.conn}: ${err.message}`)
      finish()
    })
    con.once('end', finish)
    canceller.cancel(c.client, query)
  })
}

function opDrop(req) {
  const target = inflight.get(req.target)
  if (target && !target.answered) target.answer({ dropped: true })
  return {}
}

function abandon(connId) {
  const call = connCalls.get(connId)
  if (call && !call.answered) call.answer({ dropped: true })
  connCalls.delete(connId)
  const c = conns.get(connId)
  conns.delete(connId)
  if (c) {
    try {
      c.client.release()
    } catch (e) {
      log(`abandon ${connId}: the release threw: ${e.message}`)
    }
  }
}

function opAbandon(req) {
  abandon(req.conn)
  return {}
}

function waitEnd(clients, ms) {
  const ends = [...clients].map((c) => new Promise((resolve) => c.once('end', resolve)))
  return Promise.race([Promise.all(ends), new Promise((resolve) => setTimeout(resolve, ms).unref())])
}

async function closePool(id) {
  const p = pools.get(id)
  if (!p) return
  for (const [cid, c] of [...conns]) if (c.poolId === id) abandon(cid)
  for (const state of inflight.values()) {
    if (state.req.op === 'checkout' && state.req.pool === id && !state.answered) state.answer({ dropped: true })
  }
  pools.delete(id)
  const live = new Set(p.clients)
  await Promise.race([p.pool.end(), new Promise((resolve) => setTimeout(resolve, 5000).unref())])
  await waitEnd(live, 3000)
}

async function opClosePool(req) {
  await closePool(req.pool)
  return {}
}

function opGuard() {
  throw new Failure('unsupported', 'node-postgres has no advisory-lock guard API')
}

function opLibrary(req) {
  throw new Failure('unsupported', `no library call '${req.name}' here`)
}

const OPS = {
  hello: opHello,
  ping: () => ({}),
  open_pool: opOpenPool,
  close_pool: opClosePool,
  checkout: opCheckout,
  query: (req, state) => opQuery(req, state),
  begin: opTransaction,
  commit: opTransaction,
  rollback: opTransaction,
  return: opReturn,
  cancel: opCancel,
  drop: opDrop,
  abandon: opAbandon,
  guard: opGuard,
  library: opLibrary,
}

function handle(req) {
  const id = req.id
  const state = { req, answered: false, timer: null }
  state.answer = (msg) => {
    if (state.answered) return
    state.answered = true
    if (inflight.get(id) === state) inflight.delete(id)
    send({ id, ...msg })
  }
  inflight.set(id, state)
  const fn = typeof req.op === 'string' && Object.prototype.hasOwnProperty.call(OPS, req.op) ? OPS[req.op] : null
  Promise.resolve()
    .then(() => {
      if (!fn) throw new Failure('protocol', `unknown request '${req.op}'`)
      return fn(req, state)
    })
    .then(
      (ok) => {
        if (ok !== undefined) state.answer({ ok })
      },
      (e) => {
        const f = failureOf(e)
        const error = { kind: f.kind, message: f.message }
        if (f.sqlstate) error.sqlstate = f.sqlstate
        const msg = { error }
        if (f.elapsed_ms !== undefined) msg.elapsed_ms = f.elapsed_ms
        state.answer(msg)
      }
    )
}

function parentPid() {
  try {
    const stat = fs.readFileSync('/proc/self/stat', 'utf8')
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
  } catch (e) {
    return process.ppid
  }
}

async function shutdown(why) {
  log(why)
  const t = setTimeout(() => process.exit(0), 6000)
  t.unref()
  await Promise.all([...pools.keys()].map((id) => closePool(id).catch(() => {})))
  process.exit(0)
}

function main() {
  const parent = parentPid()
  // The harness gone (even by SIGKILL) with our stdin still open somewhere.
  setInterval(() => {
    if (parentPid() !== parent) {
      log('the harness is gone; exiting')
      process.exit(0)
    }
  }, 500).unref()
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity })
  rl.on('line', (line) => {
    if (!line.trim()) return
    let req
    try {
      req = JSON.parse(line)
      if (req === null || typeof req !== 'object' || Array.isArray(req)) throw new Error('not an object')
    } catch (e) {
      log(`a request that is not a JSON object (${e.message}): ${line.slice(0, 200)}`)
      send({ id: null, error: { kind: 'protocol', message: `not a JSON object: ${e.message}` } })
      return
    }
    handle(req)
  })
  rl.on('close', () => shutdown('stdin closed; closing the pools and exiting'))
}

main()
