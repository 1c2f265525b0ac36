#!/usr/bin/env python3
"""locklab driver adapter for Python asyncio pools (asyncpg, psycopg_pool).

Speaks locklab's driver protocol, version 1 (docs/src/protocol.md): one
JSON object per line on stdin (requests) and stdout (answers), several
requests in flight at once, each answered by its `id`. Diagnostics go to
stderr; the harness shows the last lines of it when something goes wrong.

usage: adapter.py LIBRARY CONFIG
  LIBRARY  asyncpg | psycopg
  CONFIG   defaults | reset-search-path (asyncpg) | reset-unlock-all | check (psycopg)

Everything runs on one asyncio event loop, as a Python service would; SQL
timings are measured here around the library call (time.perf_counter), so
the protocol's round trip does not count as lock wait.
"""

import asyncio
import json
import os
import re
import sys
import time

PROTOCOL = 1


def log(*parts):
    print("adapter:", *parts, file=sys.stderr, flush=True)


def split_statements(sql):
    """Splits a simple-query string into statements at top-level semicolons
    (outside quotes, dollar quotes and comments): asyncpg's fetch() takes
    one statement, and psycopg2's execute() keeps only the last result."""
    out, cur, i, n = [], [], 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"":
            j = i + 1
            while j < n:
                if sql[j] == c:
                    if j + 1 < n and sql[j + 1] == c:
                        j += 2
                        continue
                    break
                j += 1
            cur.append(sql[i : j + 1])
            i = j + 1
        elif c == "-" and sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            cur.append(sql[i:j])
            i = j
        elif c == "/" and sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            j = n if j < 0 else j + 2
            cur.append(sql[i:j])
            i = j
        elif c == "$":
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] == "_"):
                j += 1
            if j < n and sql[j] == "$" and not sql[i + 1 : j][:1].isdigit():
                tag = sql[i : j + 1]
                k = sql.find(tag, j + 1)
                k = n if k < 0 else k + len(tag)
                cur.append(sql[i:k])
                i = k
            else:
                cur.append(c)
                i += 1
        elif c == ";":
            out.append("".join(cur))
            cur = []
            i += 1
        else:
            cur.append(c)
            i += 1
    out.append("".join(cur))
    stmts = [s for s in out if strip_comments(s).strip()]
    return stmts or [sql]


def strip_comments(s):
    lines = [ln.split("--", 1)[0] for ln in s.splitlines()]
    return " ".join(lines)


def leading_words(stmt, n=2):
    """The first `n` words of a statement (lower case), after whitespace and
    comments (`--` to the end of the line, nested `/* */`)."""
    i, k = 0, len(stmt)
    while i < k:
        if stmt[i].isspace():
            i += 1
        elif stmt.startswith("--", i):
            j = stmt.find("\n", i)
            i = k if j < 0 else j + 1
        elif stmt.startswith("/*", i):
            depth, i = 1, i + 2
            while i < k and depth:
                if stmt.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif stmt.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        else:
            break
    words = []
    for m in re.finditer(r"[A-Za-z_]+|\S", stmt[i:]):
        words.append(m.group(0).lower())
        if len(words) == n:
            break
    return words


def controls_transaction(stmt):
    """Whether a statement is explicit transaction control (BEGIN, START
    TRANSACTION, COMMIT, END, ROLLBACK, ABORT, SAVEPOINT, RELEASE, PREPARE
    TRANSACTION, COMMIT/ROLLBACK PREPARED): PostgreSQL docs, SQL Commands."""
    words = leading_words(stmt)
    first = words[0] if words else ""
    if first in ("begin", "start", "commit", "end", "rollback", "abort", "savepoint", "release"):
        return True
    return first == "prepare" and words[1:2] == ["transaction"]


def needs_implicit_transaction(stmts, in_transaction):
    """Whether running `stmts` (the statements of one `query`, split) one by
    one must be wrapped in BEGIN ... COMMIT (ROLLBACK on an error) to mean
    what one simple Query message of them means: PostgreSQL runs the
    statements of one Query message as one implicit transaction, unless the
    session is already in a transaction block (they continue it) or they
    hold explicit transaction control (PostgreSQL docs, Frontend/Backend
    Protocol, "Multiple Statements in a Simple Query", §55.2.2.1 in 17).
    With transaction control in the text the statements run as they are,
    one by one: PostgreSQL's retroactive inclusion of statements before a
    BEGIN into its block is not emulated (docs/src/protocol.md)."""
    return len(stmts) > 1 and not in_transaction and not any(controls_transaction(s) for s in stmts)


def text_of(v):
    """A Python value in PostgreSQL's text format (t/f for booleans)."""
    if v is None:
        return None
    if v is True:
        return "t"
    if v is False:
        return "f"
    return str(v)


class Failure(Exception):
    """A server error (sqlstate set) or a client one."""

    def __init__(self, message, sqlstate=None, kind=None):
        super().__init__(message)
        self.sqlstate = sqlstate
        self.kind = kind or ("db" if sqlstate else "client")


class Asyncpg:
    """asyncpg's own pool: create_pool / acquire / release."""

    def __init__(self, config):
        import asyncpg

        self.asyncpg = asyncpg
        self.config = config

    def describe(self):
        return {
            "library": "asyncpg",
            "version": self.asyncpg.__version__,
            "details": "",
            "cancel": False,
            "no_cancel_reason": "asyncpg has no public cancel API (cancelling the awaiting task sends a cancel request)",
        }

    async def open_pool(self, spec, max_size, checkout_timeout):
        settings = {"application_name": spec["application_name"]}
        settings.update(dict(spec["options"]))
        kwargs = {}
        if self.config == "reset-search-path":

            async def reset(conn):
                # The user's own clean-up on release, as asyncpg's docs invite
                # (create_pool(reset=...)): it replaces Connection.reset().
                await conn.execute("reset search_path")

            kwargs["reset"] = reset
        pool = await self.asyncpg.create_pool(
            host=spec["host"],
            port=spec["port"],
            user=spec["user"],
            password=spec.get("password"),
            database=spec["dbname"],
            server_settings=settings,
            min_size=min(10, max_size),
            max_size=max_size,
            **kwargs,
        )
        return pool

    async def checkout(self, pool, timeout):
        return await pool.acquire(timeout=timeout)

    def pid(self, conn):
        return conn.get_server_pid()

    def listen_notices(self, conn, notices):
        def on_log(_conn, msg):
            notices.append(f"{msg.severity}: {msg.message}")

        conn.add_log_listener(on_log)
        return lambda: conn.remove_log_listener(on_log)

    async def query(self, conn, sql):
        # asyncpg has no call that runs several statements and returns their
        # rows: fetch() takes one statement (the extended protocol) and
        # execute() without arguments (the simple protocol) returns only a
        # status. So the statements run one by one, wrapped in asyncpg's
        # Transaction (BEGIN ... COMMIT, ROLLBACK on an error) where one
        # simple Query message would be one implicit transaction
        # (needs_implicit_transaction).
        rows, columns = [], []
        stmts = split_statements(sql)

        async def run_all():
            nonlocal columns
            for stmt in stmts:
                records = await conn.fetch(stmt)
                if records:
                    columns = list(records[0].keys())
                rows.extend([text_of(v) for v in r.values()] for r in records)

        try:
            if needs_implicit_transaction(stmts, conn.is_in_transaction()):
                async with conn.transaction():
                    await run_all()
            else:
                await run_all()
        except self.asyncpg.PostgresError as e:
            raise Failure(e.args[0] if e.args else str(e), e.sqlstate)
        return columns, rows

    async def give_back(self, pool, conn):
        # The proxy handed out by acquire() is unusable once released: ask the
        # connection behind it whether the pool closed it. A proxy without
        # one was already released by asyncpg when its connection closed
        # (PoolConnectionHolder._release_on_close detaches it; release() of it
        # then does nothing): closed.
        raw = getattr(conn, "_con", None)
        await pool.release(conn)
        if raw is None:
            return "closed"
        return "closed" if raw.is_closed() else "to_pool"

    async def settle_cancel(self, conn):
        """asyncpg sends the cancel request for a cancelled call from a task
        of its own (Connection._cancel, tracked in _cancellations): wait for
        it, so that an answer means asyncpg has finished giving up."""
        raw = getattr(conn, "_con", None) or conn
        pending = list(getattr(raw, "_cancellations", ()) or ())
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def cancel(self, conn):
        raise Failure("asyncpg has no public cancel API (cancelling the task sends one)", kind="unsupported")

    async def close_pool(self, pool):
        await pool.close()

    def is_closed(self, conn):
        return conn.is_closed()


class Psycopg:
    """psycopg_pool's AsyncConnectionPool: getconn / putconn."""

    def __init__(self, config):
        import psycopg
        import psycopg_pool

        self.psycopg = psycopg
        self.pool_mod = psycopg_pool
        self.config = config

    def describe(self):
        v = self.psycopg.pq.version()
        libpq = f"{v // 10000}.{v % 10000}" if v >= 100000 else str(v)
        return {
            "library": "psycopg",
            "version": self.psycopg.__version__,
            "details": f"psycopg-pool {self.pool_mod.__version__}, {self.psycopg.pq.__impl__} libpq {libpq}",
            "cancel": True,
            "no_cancel_reason": "",
        }

    async def open_pool(self, spec, max_size, checkout_timeout):
        kwargs = {
            "host": spec["host"],
            "port": spec["port"],
            "user": spec["user"],
            "dbname": spec["dbname"],
            "application_name": spec["application_name"],
            # Statements run as the scenario sends them, in PostgreSQL's own
            # autocommit; psycopg's default (autocommit=False) would open a
            # transaction around every statement (see docs/src/drivers.md, the Python columns).
            "autocommit": True,
        }
        if spec.get("password"):
            kwargs["password"] = spec["password"]
        if spec["options"]:
            kwargs["options"] = " ".join(f"-c {k}={v}" for k, v in spec["options"])
        extra = {}
        if self.config == "reset-unlock-all":

            async def reset(conn):
                # The guide's advice, written as a user would: release every
                # session lock when a connection comes back to the pool.
                await conn.execute("select pg_advisory_unlock_all()")

            extra["reset"] = reset
        elif self.config == "check":
            extra["check"] = self.pool_mod.AsyncConnectionPool.check_connection
        pool = tracked_pool_class(self.pool_mod.AsyncConnectionPool)(
            kwargs=kwargs,
            min_size=min(4, max_size),
            max_size=max_size,
            timeout=checkout_timeout,
            open=False,
            **extra,
        )
        await pool.open(wait=True)
        return pool

    async def checkout(self, pool, timeout):
        return await pool.getconn(timeout=timeout)

    def pid(self, conn):
        return conn.info.backend_pid

    def listen_notices(self, conn, notices):
        def on_notice(diag):
            notices.append(f"{diag.severity}: {diag.message_primary}")

        conn.add_notice_handler(on_notice)
        return lambda: conn.remove_notice_handler(on_notice)

    async def query(self, conn, sql):
        # execute() without parameters sends the string as one simple Query
        # message (psycopg 3, _cursor_base.py _execute_send: PQsendQuery
        # unless there are parameters, binary results or a pipeline), so
        # the server runs several statements as one implicit transaction;
        # each statement's result is one result set of the cursor (nextset()).
        rows, columns = [], []
        try:
            cur = conn.cursor()
            await cur.execute(sql)
            while True:
                res = cur.pgresult
                if res is not None and res.nfields:
                    columns = [res.fname(i).decode() for i in range(res.nfields)]
                    for r in range(res.ntuples):
                        vals = [res.get_value(r, c) for c in range(res.nfields)]
                        rows.append([None if v is None else v.decode() for v in vals])
                if not cur.nextset():
                    break
            await cur.close()
        except self.psycopg.Error as e:
            if e.sqlstate:
                raise Failure(e.diag.message_primary or str(e), e.sqlstate)
            raise Failure(str(e))
        return columns, rows

    async def give_back(self, pool, conn):
        # With a `reset=` callback psycopg_pool finishes the return in a
        # worker task (ReturnConnection): wait for that, as the protocol's
        # `return` answers once the pool has taken the connection back.
        done = pool.returned_event(conn)
        await pool.putconn(conn)
        if not (conn.closed and not done.is_set()):
            # (A closed pool closes the connection without returning it.)
            await asyncio.wait_for(done.wait(), 30)
        return "closed" if conn.closed else "to_pool"

    async def settle_cancel(self, conn):
        """psycopg sends its cancel and waits for the call to end inside the
        cancelled call itself (AsyncConnection.wait): nothing is left to wait for."""

    async def cancel(self, conn):
        await conn.cancel_safe()

    async def close_pool(self, pool):
        await pool.close()

    def is_closed(self, conn):
        return conn.closed


def tracked_pool_class(base):
    """`base` (psycopg_pool.AsyncConnectionPool) with an event per returned
    connection, set when the pool's own _return_connection has finished
    (inline, or in its worker task); the pool's behaviour is unchanged."""

    class TrackedPool(base):
        def returned_event(self, conn):
            events = self.__dict__.setdefault("_locklab_returned", {})
            events[id(conn)] = ev = asyncio.Event()
            return ev

        async def _return_connection(self, conn, from_getconn):
            try:
                await super()._return_connection(conn, from_getconn)
            finally:
                ev = self.__dict__.get("_locklab_returned", {}).pop(id(conn), None)
                if ev is not None:
                    ev.set()

    return TrackedPool


class Adapter:
    def __init__(self, lib):
        self.lib = lib
        self.pools = {}
        self.conns = {}  # conn id -> (pool id, connection)
        self.tx = {}  # conn id -> asyncpg Transaction started by `begin`
        self.inflight = {}  # request id -> task
        self.conn_tasks = {}  # conn id -> task of its call in flight
        self.out_lock = asyncio.Lock()

    async def send(self, msg):
        line = json.dumps(msg, separators=(",", ":")) + "\n"
        async with self.out_lock:
            sys.stdout.write(line)
            sys.stdout.flush()

    def conn(self, req):
        try:
            return self.conns[req["conn"]]
        except KeyError:
            raise Failure(f"no checked-out connection '{req.get('conn')}'", kind="protocol")

    async def bounded(self, coro, timeout_ms):
        """`coro`, given up the asyncio way (asyncio.wait_for cancels it)
        after timeout_ms; None: no bound."""
        if timeout_ms is None:
            return False, await coro
        try:
            return False, await asyncio.wait_for(coro, timeout_ms / 1000)
        except asyncio.TimeoutError:
            return True, None

    async def op_hello(self, req):
        return dict(self.lib.describe(), protocol=PROTOCOL, pid=os.getpid())

    async def op_ping(self, req):
        return {}

    async def op_open_pool(self, req):
        pool = await self.lib.open_pool(req["spec"], req["max_size"], req["checkout_timeout_ms"] / 1000)
        self.pools[req["pool"]] = pool
        return {}

    async def op_close_pool(self, req):
        """Closes the pool. Its connections still checked out are abandoned
        first (a call in flight on one is cancelled and answers `dropped`,
        then the connection goes back), as the protocol says: the library's
        close (asyncpg's Pool.close) would otherwise wait for them."""
        pool = self.pools.get(req["pool"])
        if pool is not None:
            for cid in [c for c, (p, _) in self.conns.items() if p == req["pool"]]:
                await self.op_abandon({"conn": cid})
            self.pools.pop(req["pool"], None)
            await self.lib.close_pool(pool)
        return {}

    async def op_checkout(self, req):
        pool = self.pools[req["pool"]]
        gave_up, conn = await self.bounded(
            self.lib.checkout(pool, req["checkout_timeout_ms"] / 1000), req.get("timeout_ms")
        )
        if gave_up:
            return {"gave_up": True}
        self.conns[req["conn"]] = (req["pool"], conn)
        return {"pid": self.lib.pid(conn)}

    async def op_query(self, req):
        _, conn = self.conn(req)
        notices = []
        stop = self.lib.listen_notices(conn, notices)
        t0 = time.perf_counter()
        try:
            gave_up, result = await self.bounded(self.lib.query(conn, req["sql"]), req.get("timeout_ms"))
        except Failure as f:
            f.elapsed_ms = (time.perf_counter() - t0) * 1e3
            raise
        finally:
            stop()
        elapsed_ms = (time.perf_counter() - t0) * 1e3
        if gave_up:
            await self.lib.settle_cancel(conn)
            return {"gave_up": True, "elapsed_ms": elapsed_ms}
        columns, rows = result
        return {"columns": columns, "rows": rows, "notices": notices, "elapsed_ms": elapsed_ms}

    async def op_transaction(self, req):
        """begin / commit / rollback: asyncpg through its Transaction object
        (start, commit, rollback), psycopg (whose transaction API is a
        context manager only) as SQL."""
        cid = req["conn"]
        _, conn = self.conn(req)
        action = req["op"]
        t0 = time.perf_counter()
        try:
            if isinstance(self.lib, Asyncpg) and (action == "begin") == (cid not in self.tx):
                try:
                    if action == "begin":
                        tx = conn.transaction()
                        await tx.start()
                        self.tx[cid] = tx
                    else:
                        tx = self.tx.pop(cid)
                        await (tx.commit() if action == "commit" else tx.rollback())
                except self.lib.asyncpg.PostgresError as e:
                    raise Failure(e.args[0] if e.args else str(e), e.sqlstate)
                except self.lib.asyncpg.InterfaceError as e:
                    raise Failure(str(e))
                rows = ([], [])
            else:
                rows = await self.lib.query(conn, action)
        except Failure as f:
            f.elapsed_ms = (time.perf_counter() - t0) * 1e3
            raise
        return {"columns": rows[0], "rows": rows[1], "notices": [], "elapsed_ms": (time.perf_counter() - t0) * 1e3}

    op_begin = op_commit = op_rollback = op_transaction

    async def op_return(self, req):
        pool_id, conn = self.conn(req)
        self.conns.pop(req["conn"], None)
        self.tx.pop(req["conn"], None)
        gave_up, returned = await self.bounded(self.lib.give_back(self.pools[pool_id], conn), req.get("timeout_ms"))
        return {"gave_up": True} if gave_up else {"returned": returned}

    async def op_cancel(self, req):
        _, conn = self.conn(req)
        await self.lib.cancel(conn)
        return {}

    async def op_drop(self, req):
        """Gives up on request `target` the way asyncio gives up on a call:
        its task is cancelled (a dropped future's analogue); answered once
        that call has finished giving up."""
        task = self.inflight.get(req["target"])
        if task is not None and not task.done():
            if not task.cancelling():
                task.cancel()
            # Answered once the call has given up (and its library has told
            # the server, where it does), so the harness can wait for that.
            await asyncio.wait([task])
        return {}

    async def op_guard(self, req):
        raise Failure(f"{type(self.lib).__name__.lower()} has no advisory-lock guard API", kind="unsupported")

    async def op_library(self, req):
        raise Failure(f"no library call '{req.get('name')}' here", kind="unsupported")

    async def op_abandon(self, req):
        """The connection's owner went away mid-call: the call in flight is
        cancelled and the connection goes back to its pool, as leaving an
        `async with pool.acquire()` / `pool.connection()` block on
        CancelledError does."""
        task = self.conn_tasks.get(req["conn"])
        if task is not None and not task.done():
            # Once only: a second cancel would interrupt the library's own
            # clean-up of the first (psycopg's cancel-and-wait).
            if not task.cancelling():
                task.cancel()
            try:
                await task
            except BaseException:
                pass
        entry = self.conns.pop(req["conn"], None)
        self.tx.pop(req["conn"], None)
        if entry is not None:
            pool_id, conn = entry
            await self.lib.settle_cancel(conn)
            try:
                await self.lib.give_back(self.pools[pool_id], conn)
            except Exception as e:
                log(f"abandon {req['conn']}: the return raised {type(e).__name__}: {e}")
        return {}

    async def handle(self, req):
        rid = req.get("id")
        op = req.get("op")
        fn = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
        try:
            if fn is None:
                raise Failure(f"unknown request '{op}'", kind="protocol")
            answer = {"id": rid, "ok": await fn(req)}
        except asyncio.CancelledError:
            answer = {"id": rid, "dropped": True}
            entry = self.conns.get(req.get("conn"))
            if entry is not None:
                await self.lib.settle_cancel(entry[1])
        except Failure as f:
            err = {"kind": f.kind, "message": str(f)}
            if f.sqlstate:
                err["sqlstate"] = f.sqlstate
            answer = {"id": rid, "error": err}
            if hasattr(f, "elapsed_ms"):
                answer["elapsed_ms"] = f.elapsed_ms
        except Exception as e:
            sqlstate = getattr(e, "sqlstate", None)
            answer = {"id": rid, "error": {"kind": "db" if sqlstate else "client", "message": f"{type(e).__name__}: {e}"}}
            if sqlstate:
                answer["error"]["sqlstate"] = sqlstate
        finally:
            self.inflight.pop(rid, None)
            if "conn" in req and self.conn_tasks.get(req["conn"]) is asyncio.current_task():
                self.conn_tasks.pop(req["conn"], None)
        await self.send(answer)

    async def serve(self):
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 24)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        parent = os.getppid()

        async def orphan_watch():
            # The harness gone (even by SIGKILL): stop, leaving nothing behind.
            while os.getppid() == parent:
                await asyncio.sleep(0.5)
            log("the harness is gone; exiting")
            os._exit(0)

        asyncio.ensure_future(orphan_watch())
        while True:
            line = await reader.readline()
            if not line:
                break
            try:
                req = json.loads(line)
                if not isinstance(req, dict):
                    raise ValueError("not an object")
            except ValueError as e:
                log(f"a request that is not a JSON object ({e}): {line[:200]!r}")
                await self.send({"id": None, "error": {"kind": "protocol", "message": f"not a JSON object: {e}"}})
                continue
            task = asyncio.ensure_future(self.handle(req))
            self.inflight[req.get("id")] = task
            if req.get("op") in ("query", "begin", "commit", "rollback") and "conn" in req:
                self.conn_tasks[req["conn"]] = task
        for pool in list(self.pools.values()):
            try:
                await asyncio.wait_for(self.lib.close_pool(pool), 5)
            except Exception:
                pass


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("asyncpg", "psycopg"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    library, config = sys.argv[1], sys.argv[2]
    lib = Asyncpg(config) if library == "asyncpg" else Psycopg(config)
    asyncio.run(Adapter(lib).serve())


if __name__ == "__main__":
    main()
