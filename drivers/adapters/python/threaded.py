#!/usr/bin/env python3
"""locklab driver adapter for Python's thread-based pools over psycopg2:
psycopg2.pool.ThreadedConnectionPool and SQLAlchemy 2's QueuePool.

Speaks locklab's driver protocol, version 1 (docs/src/protocol.md): one JSON
object per line on stdin (requests) and stdout (answers). Each request runs
in a thread of its own, as in a threaded application, so several are in
flight at once and each is answered by its `id`. Diagnostics go to stderr.

usage: threaded.py LIBRARY CONFIG
  LIBRARY  psycopg2 | sqlalchemy
  CONFIG   defaults | reset-unlock-all (sqlalchemy)

"Defaults", per library (the protocol asks for autocommit and at most
`max_size` connections; the rest is the library's own):
- psycopg2: ThreadedConnectionPool(minconn=1, maxconn=max_size), every
  connection in autocommit (a connection_factory setting it on connect).
  minconn has no default: 1 is the smallest pool that keeps a connection;
  putconn keeps a returned connection only while fewer than minconn are
  idle and closes it otherwise (psycopg2/pool.py, _putconn). getconn never
  waits: an exhausted pool raises PoolError at once. putconn rolls back a
  connection in a transaction, which in autocommit does nothing.
- sqlalchemy: create_engine("postgresql+psycopg2://...") defaults (QueuePool,
  reset_on_return="rollback", no pre-ping) with isolation_level="AUTOCOMMIT",
  pool_size=min(5, max_size) (its default capped), max_overflow=max_size -
  pool_size (so at most max_size connections; overflow ones are closed on
  return), pool_timeout=checkout_timeout_ms. Connections are what an
  application holding an advisory lock uses: `engine.connect()` (a
  Connection), given back with `Connection.close()`; SQL through
  `exec_driver_sql`.
- sqlalchemy reset-unlock-all: the same, with a listener of the pool's
  `reset` event (SQLAlchemy 2.0 docs, "Reset On Return" and
  PoolEvents.reset) running `select pg_advisory_unlock_all()` on the DBAPI
  connection of every connection given back (not when the pool only
  terminates it), before the default rollback.

Giving up: psycopg2 blocks in a call and cannot be interrupted, so a call
given up (`timeout_ms`, `drop`) is left running in its thread while the
adapter stops waiting, as the calling code would; nothing is sent to the
server. The connection stays busy until that call ends (a later request on
it waits, as the application thread's next statement would). `cancel` is
psycopg2's `connection.cancel()` (libpq PQcancel), thread-safe, sent from
the request's own thread; with SQLAlchemy, on the DBAPI connection behind
the Connection (SQLAlchemy has no cancel API of its own).
"""

import json
import os
import signal
import sys
import threading
import time

# The same splitting and emulation of one implicit transaction as the asyncio adapter.
from adapter import needs_implicit_transaction, split_statements

# libpq's PQTRANS_IDLE (psycopg2.extensions.TRANSACTION_STATUS_IDLE): no transaction block open.
TRANSACTION_STATUS_IDLE = 0

PROTOCOL = 1


def log(*parts):
    print("threaded-adapter:", *parts, file=sys.stderr, flush=True)


class Failure(Exception):
    """A server error (sqlstate set) or a client one."""

    def __init__(self, message, sqlstate=None, kind=None):
        super().__init__(message)
        self.sqlstate = sqlstate
        self.kind = kind or ("db" if sqlstate else "client")


class Dropped(Exception):
    """The request was given up by `drop` (or by closing its pool)."""


def text_of(v):
    """A value in PostgreSQL's text format. The text casters below make
    psycopg2 return strings; per-connection casters (SQLAlchemy's UUID) may
    still give objects whose str() is the text form."""
    if v is None or isinstance(v, str):
        return v
    if v is True:
        return "t"
    if v is False:
        return "f"
    return str(v)


def libpq_text(v):
    return f"{v // 10000}.{v % 10000}" if v >= 100000 else f"{v // 10000}.{v // 100 % 100}.{v % 100}"


def options_text(options):
    """libpq's `options`: -c name=value, spaces and backslashes escaped."""

    def esc(s):
        return str(s).replace("\\", "\\\\").replace(" ", "\\ ")

    return " ".join(f"-c {esc(k)}={esc(v)}" for k, v in options)


class NoticeSink:
    """psycopg2 calls append() with libpq's formatted notice ("WARNING:  text\\n
    DETAIL: ..."): keep "SEVERITY: primary message"."""

    def __init__(self):
        self.items = []

    def append(self, msg):
        first = msg.split("\n", 1)[0]
        sev, sep, text = first.partition(":")
        self.items.append(f"{sev}: {text.strip()}" if sep else first.strip())


def install_text_casters(psycopg2, scope=None):
    """Every type psycopg2 converts (globally, or on connection `scope`)
    comes back as the server's text instead."""
    ext = psycopg2.extensions
    table = ext.string_types if scope is None else scope.string_types
    for oid in list(table):
        ext.register_type(ext.new_type((oid,), f"LOCKLAB_TEXT_{oid}", lambda s, cur: s), scope)


class Psycopg2Lib:
    """psycopg2.pool.ThreadedConnectionPool: getconn / putconn / closeall."""

    name = "psycopg2"

    def __init__(self):
        import psycopg2
        import psycopg2.extensions
        import psycopg2.pool

        self.psycopg2 = psycopg2
        install_text_casters(psycopg2)

        class AutocommitConnection(psycopg2.extensions.connection):
            # Autocommit from the connection's start, as the protocol asks.
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.autocommit = True

        self.factory = AutocommitConnection

    def describe(self):
        p = self.psycopg2
        return {
            "library": "psycopg2",
            "version": p.__version__.split()[0],
            "details": f"libpq {libpq_text(p.extensions.libpq_version())}",
            "cancel": True,
            "no_cancel_reason": "",
        }

    def open_pool(self, spec, max_size, checkout_timeout):
        kwargs = {
            "host": spec["host"],
            "port": spec["port"],
            "user": spec["user"],
            "dbname": spec["dbname"],
            "application_name": spec["application_name"],
            "connection_factory": self.factory,
        }
        if spec.get("password"):
            kwargs["password"] = spec["password"]
        if spec["options"]:
            kwargs["options"] = options_text(spec["options"])
        return self.psycopg2.pool.ThreadedConnectionPool(1, max_size, **kwargs)

    def checkout(self, pool):
        return pool.getconn()

    def dbapi(self, handle):
        return handle

    def run(self, handle, stmt):
        cur = handle.cursor()
        try:
            cur.execute(stmt)  # no parameters: the string is sent as it is
            if cur.description is None:
                return None, []
            return [d[0] for d in cur.description], cur.fetchall()
        finally:
            try:
                cur.close()
            except Exception:
                pass

    def give_back(self, pool, handle):
        pool.putconn(handle)
        return "closed" if handle.closed else "to_pool"

    def close_pool(self, pool):
        pool.closeall()

    def failure(self, e):
        return psycopg2_failure(self.psycopg2, e)


def psycopg2_failure(psycopg2, e):
    if isinstance(e, psycopg2.Error):
        if e.pgcode:
            primary = getattr(e.diag, "message_primary", None)
            return Failure(primary or str(e).strip(), e.pgcode)
        return Failure(str(e).strip() or type(e).__name__)
    return None


class SqlalchemyLib:
    """SQLAlchemy 2's QueuePool behind create_engine: engine.connect() /
    Connection.close() / engine.dispose()."""

    name = "sqlalchemy"

    def __init__(self, config="defaults"):
        self.config = config
        import psycopg2
        import psycopg2.extensions
        import sqlalchemy

        self.psycopg2 = psycopg2
        self.sa = sqlalchemy
        install_text_casters(psycopg2)

    def describe(self):
        p = self.psycopg2
        return {
            "library": "SQLAlchemy",
            "version": self.sa.__version__,
            "details": f"psycopg2 {p.__version__.split()[0]}, libpq {libpq_text(p.extensions.libpq_version())}",
            "cancel": True,
            "no_cancel_reason": "",
        }

    def open_pool(self, spec, max_size, checkout_timeout):
        sa = self.sa
        url = sa.URL.create(
            "postgresql+psycopg2",
            username=spec["user"],
            password=spec.get("password") or None,
            host=spec["host"],
            port=spec["port"],
            database=spec["dbname"],
        )
        connect_args = {"application_name": spec["application_name"]}
        if spec["options"]:
            connect_args["options"] = options_text(spec["options"])
        pool_size = min(5, max_size)
        engine = sa.create_engine(
            url,
            isolation_level="AUTOCOMMIT",
            pool_size=pool_size,
            max_overflow=max_size - pool_size,
            pool_timeout=checkout_timeout,
            connect_args=connect_args,
        )

        @sa.event.listens_for(engine, "connect")
        def text_values(dbapi_conn, _record):
            # After the dialect's own per-connection casters (UUID): text.
            install_text_casters(self.psycopg2, dbapi_conn)

        if self.config == "reset-unlock-all":

            @sa.event.listens_for(engine, "reset")
            def unlock_all(dbapi_conn, _record, reset_state):
                if reset_state.terminate_only:
                    return
                cur = dbapi_conn.cursor()
                try:
                    cur.execute("select pg_advisory_unlock_all()")
                finally:
                    cur.close()

        return engine

    def checkout(self, engine):
        return engine.connect()

    def dbapi(self, handle):
        # The DBAPI connection behind the Connection, or None once it was
        # invalidated (Connection.connection would reconnect: a side effect).
        fairy = handle._dbapi_connection
        return None if fairy is None else fairy.dbapi_connection

    def run(self, handle, stmt):
        # no_parameters: a '%' in the SQL is not a parameter marker.
        result = handle.exec_driver_sql(stmt, execution_options={"no_parameters": True})
        if not result.returns_rows:
            result.close()
            return None, []
        return list(result.keys()), result.fetchall()

    def give_back(self, engine, handle):
        raw = handle._dbapi_connection  # the pool's proxy, kept to see its fate
        dbapi = getattr(raw, "dbapi_connection", None)
        handle.close()
        disposed = getattr(engine, "locklab_disposed_pool", None)
        if disposed is not None:
            # Returned after close_pool (its call had to end first): the old
            # pool keeps it idle; close that pool's idle connections again.
            disposed.dispose()
        if dbapi is None or dbapi.closed:
            return "closed"
        return "to_pool"

    def close_pool(self, engine):
        engine.locklab_disposed_pool = engine.pool
        engine.dispose()

    def failure(self, e):
        if isinstance(e, self.sa.exc.DBAPIError) and e.orig is not None:
            f = psycopg2_failure(self.psycopg2, e.orig)
            if f is not None:
                return f
        if isinstance(e, self.sa.exc.SQLAlchemyError):
            return Failure(str(e).split("\n")[0])
        return psycopg2_failure(self.psycopg2, e)


class Call:
    """A library call running in a thread of its own."""

    def __init__(self):
        self.done = threading.Event()
        self.result = None
        self.exc = None
        self.elapsed_ms = None
        self.lock = threading.Lock()
        self.orphaned = False  # nobody waits for it any more


class Req:
    def __init__(self, rid):
        self.id = rid
        self.wake = threading.Event()  # set when its call ends or it is dropped
        self.dropped = False
        self.answered = threading.Event()


class Conn:
    def __init__(self, pool_id, handle):
        self.pool_id = pool_id
        self.handle = handle
        self.pool = None
        self.lock = threading.Lock()  # held while a library call runs on it
        self.current = None  # the Req of the call in flight


class Adapter:
    def __init__(self, lib):
        self.lib = lib
        self.pools = {}
        self.conns = {}
        self.inflight = {}
        self.state = threading.Lock()
        self.out = threading.Lock()

    def send(self, msg):
        line = json.dumps(msg, separators=(",", ":")) + "\n"
        with self.out:
            try:
                sys.stdout.write(line)
                sys.stdout.flush()
            except (BrokenPipeError, ValueError):
                os._exit(0)

    def failure(self, e):
        if isinstance(e, Failure):
            return e
        f = self.lib.failure(e)
        return f if f is not None else Failure(f"{type(e).__name__}: {e}")

    # -- running library calls in threads --------------------------------

    def wait(self, req, fn, timeout_ms=None, conn=None, on_orphan=None):
        """Runs fn() in a thread of its own (holding conn.lock: after a
        given-up call still running on that connection) and waits for it, for
        at most timeout_ms, or until req is dropped. Returns ("done", call) or
        ("gave_up", elapsed_ms); raises Dropped. A call given up keeps running;
        on_orphan(result) then runs if it succeeds (a late checkout goes back)."""
        call = Call()

        def body():
            try:
                if conn is not None:
                    conn.lock.acquire()
                try:
                    t0 = time.perf_counter()
                    try:
                        call.result = fn()
                    except BaseException as e:
                        call.exc = e
                    call.elapsed_ms = (time.perf_counter() - t0) * 1e3
                finally:
                    if conn is not None:
                        conn.lock.release()
            finally:
                with call.lock:
                    call.done.set()
                    orphan = call.orphaned
                req.wake.set()
                if orphan and on_orphan is not None and call.exc is None:
                    try:
                        on_orphan(call.result)
                    except Exception as e:
                        log(f"request {req.id}: clean-up after giving up failed: {type(e).__name__}: {e}")

        t0 = time.perf_counter()
        threading.Thread(target=body, daemon=True).start()
        deadline = None if timeout_ms is None else t0 + timeout_ms / 1000
        while True:
            if call.done.is_set():
                return "done", call
            left = None if deadline is None else deadline - time.perf_counter()
            if req.dropped or (left is not None and left <= 0):
                with call.lock:
                    if call.done.is_set():
                        return "done", call
                    call.orphaned = True
                if req.dropped:
                    raise Dropped()
                return "gave_up", (time.perf_counter() - t0) * 1e3
            req.wake.wait(left)

    def conn(self, msg):
        with self.state:
            c = self.conns.get(msg.get("conn"))
        if c is None:
            raise Failure(f"no checked-out connection '{msg.get('conn')}'", kind="protocol")
        return c

    def pool(self, msg):
        with self.state:
            p = self.pools.get(msg.get("pool"))
        if p is None:
            raise Failure(f"no open pool '{msg.get('pool')}'", kind="protocol")
        return p

    def run_sql(self, handle, sql):
        """Runs `sql` (one or several statements), collecting every
        statement's rows. psycopg2's execute() sends a string without
        parameters as it is (one simple Query message: libpq PQexec), but
        keeps only the last statement's result; so the statements run one
        by one, wrapped in BEGIN ... COMMIT (ROLLBACK on an error) where one
        Query message would be one implicit transaction
        (needs_implicit_transaction; the connection's own transaction status,
        libpq PQtransactionStatus, says whether it is in one)."""
        stmts = split_statements(sql)
        dbapi = self.lib.dbapi(handle)
        in_transaction = dbapi is None or dbapi.get_transaction_status() != TRANSACTION_STATUS_IDLE
        wrap = needs_implicit_transaction(stmts, in_transaction)
        columns, rows = [], []
        if wrap:
            self.lib.run(handle, "begin")
        try:
            for stmt in stmts:
                cols, rs = self.lib.run(handle, stmt)
                if cols is not None:
                    columns = cols
                    rows.extend([text_of(v) for v in r] for r in rs)
        except BaseException:
            if wrap:
                try:
                    self.lib.run(handle, "rollback")
                except Exception as e:
                    log(f"the rollback after a failed statement raised {type(e).__name__}: {e}")
            raise
        if wrap:
            self.lib.run(handle, "commit")
        return columns, rows

    def give_back_later(self, conn, why):
        """Returns conn once the call running on it (if any) has ended, as a
        try/finally around the application's blocked call would."""

        def later():
            with conn.lock:
                try:
                    self.lib.give_back(conn.pool, conn.handle)
                except Exception as e:
                    log(f"{why}: the return raised {type(e).__name__}: {e}")

        if conn.lock.acquire(blocking=False):
            conn.lock.release()
            later()
        else:
            threading.Thread(target=later, daemon=True).start()

    # -- requests ---------------------------------------------------------

    def op_hello(self, req, msg):
        return dict(self.lib.describe(), protocol=PROTOCOL, pid=os.getpid())

    def op_ping(self, req, msg):
        return {}

    def op_open_pool(self, req, msg):
        pool = self.lib.open_pool(msg["spec"], msg["max_size"], msg["checkout_timeout_ms"] / 1000)
        with self.state:
            self.pools[msg["pool"]] = pool
        return {}

    def op_checkout(self, req, msg):
        pool_id = msg["pool"]
        pool = self.pool(msg)

        def late(handle):
            # Granted after the caller gave up: back to the pool.
            self.lib.give_back(pool, handle)

        status, x = self.wait(req, lambda: self.lib.checkout(pool), msg.get("timeout_ms"), None, late)
        if status == "gave_up":
            return {"gave_up": True}
        if x.exc is not None:
            raise self.failure(x.exc)
        conn = Conn(pool_id, x.result)
        conn.pool = pool
        with self.state:
            self.conns[msg["conn"]] = conn
        out = {}
        try:
            out["pid"] = self.lib.dbapi(conn.handle).info.backend_pid
        except Exception:
            pass
        return out

    def op_query(self, req, msg, sql=None):
        conn = self.conn(msg)
        sql = msg["sql"] if sql is None else sql
        sink = NoticeSink()

        def call():
            dbapi = self.lib.dbapi(conn.handle)
            old = None
            if dbapi is not None:
                old, dbapi.notices = dbapi.notices, sink
            try:
                return self.run_sql(conn.handle, sql)
            finally:
                if dbapi is not None:
                    dbapi.notices = old

        conn.current = req
        try:
            status, x = self.wait(req, call, msg.get("timeout_ms"), conn)
        finally:
            conn.current = None
        if status == "gave_up":
            return {"gave_up": True, "elapsed_ms": x}
        if x.exc is not None:
            f = self.failure(x.exc)
            f.elapsed_ms = x.elapsed_ms
            raise f
        columns, rows = x.result
        return {"columns": columns, "rows": rows, "notices": sink.items, "elapsed_ms": x.elapsed_ms}

    def op_transaction(self, req, msg):
        # Autocommit: the library's commit()/rollback() do nothing (psycopg2)
        # and SQLAlchemy's begin() sends nothing: the statements are sent.
        return self.op_query(req, msg, sql=msg["op"])

    op_begin = op_commit = op_rollback = op_transaction

    def op_return(self, req, msg):
        with self.state:
            conn = self.conns.pop(msg.get("conn"), None)
        if conn is None:
            raise Failure(f"no checked-out connection '{msg.get('conn')}'", kind="protocol")
        status, x = self.wait(req, lambda: self.lib.give_back(conn.pool, conn.handle), msg.get("timeout_ms"), conn)
        if status == "gave_up":
            return {"gave_up": True}
        if x.exc is not None:
            raise self.failure(x.exc)
        return {"returned": x.result}

    def op_cancel(self, req, msg):
        conn = self.conn(msg)
        dbapi = self.lib.dbapi(conn.handle)
        if dbapi is not None:
            dbapi.cancel()  # PQcancel; with nothing in flight the server ignores it
        return {}

    def op_drop(self, req, msg):
        with self.state:
            target = self.inflight.get(msg.get("target"))
        if target is not None and target is not req and not target.answered.is_set():
            target.dropped = True
            target.wake.set()
            target.answered.wait(5)
        return {}

    def op_abandon(self, req, msg):
        with self.state:
            conn = self.conns.pop(msg.get("conn"), None)
        if conn is None:
            raise Failure(f"no checked-out connection '{msg.get('conn')}'", kind="protocol")
        self.give_back_later(conn, f"abandon {msg.get('conn')}")
        return {}

    def op_guard(self, req, msg):
        raise Failure(f"{self.lib.name} has no advisory-lock guard API", kind="unsupported")

    def op_library(self, req, msg):
        raise Failure(f"no library call '{msg.get('name')}' here", kind="unsupported")

    def op_close_pool(self, req, msg):
        pool_id = msg.get("pool")
        with self.state:
            pool = self.pools.pop(pool_id, None)
            owned = [(cid, c) for cid, c in self.conns.items() if c.pool_id == pool_id]
            for cid, _ in owned:
                del self.conns[cid]
        if pool is None:
            raise Failure(f"no open pool '{pool_id}'", kind="protocol")
        # Connections still checked out are abandoned: a call in flight
        # answers dropped and keeps running in its thread.
        for cid, c in owned:
            cur = c.current
            if cur is not None and not cur.answered.is_set():
                cur.dropped = True
                cur.wake.set()
                cur.answered.wait(1)
            self.give_back_later(c, f"close_pool {pool_id}: {cid}")
        self.close_bounded(pool, 3)
        return {}

    def close_bounded(self, pool, seconds):
        """Closes the pool in a thread: psycopg2's closeall waits for a
        connection whose call is still running; stop waiting after `seconds`."""
        t = threading.Thread(target=self._close, args=(pool,), daemon=True)
        t.start()
        t.join(seconds)
        return t

    def _close(self, pool):
        try:
            self.lib.close_pool(pool)
        except Exception as e:
            log(f"closing a pool raised {type(e).__name__}: {e}")

    # -- the loop ---------------------------------------------------------

    def handle(self, req, msg):
        op = msg.get("op")
        fn = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
        try:
            if fn is None:
                raise Failure(f"unknown request '{op}'", kind="protocol")
            answer = {"id": req.id, "ok": fn(req, msg)}
        except Dropped:
            answer = {"id": req.id, "dropped": True}
        except KeyError as e:
            answer = {"id": req.id, "error": {"kind": "protocol", "message": f"missing field {e}"}}
        except Exception as e:
            f = self.failure(e)
            answer = {"id": req.id, "error": {"kind": f.kind, "message": str(f)}}
            if f.sqlstate:
                answer["error"]["sqlstate"] = f.sqlstate
            if getattr(f, "elapsed_ms", None) is not None:
                answer["elapsed_ms"] = f.elapsed_ms
        self.send(answer)
        req.answered.set()
        with self.state:
            if self.inflight.get(req.id) is req:
                del self.inflight[req.id]

    def serve(self):
        parent = os.getppid()

        def orphan_watch():
            # The harness gone (even by SIGKILL) with our stdin kept open by
            # someone else: stop, leaving nothing behind.
            while os.getppid() == parent:
                time.sleep(0.5)
            log("the harness is gone; exiting")
            os._exit(0)

        threading.Thread(target=orphan_watch, daemon=True).start()
        stdin = sys.stdin.buffer
        while True:
            line = stdin.readline()
            if not line:
                break
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
                if not isinstance(msg, dict):
                    raise ValueError("not an object")
            except ValueError as e:
                log(f"a request that is not a JSON object ({e}): {line[:200]!r}")
                self.send({"id": None, "error": {"kind": "protocol", "message": f"not a JSON object: {e}"}})
                continue
            req = Req(msg.get("id"))
            with self.state:
                self.inflight[req.id] = req
            threading.Thread(target=self.handle, args=(req, msg), daemon=True).start()
        # stdin closed: close the pools (a few seconds at most) and exit,
        # leaving calls still blocked in their threads behind.
        with self.state:
            pools = list(self.pools.values())
            self.pools.clear()
        end = time.monotonic() + 3
        threads = [threading.Thread(target=self._close, args=(p,), daemon=True) for p in pools]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
        sys.stdout.flush()
        os._exit(0)


def main():
    libs = {"psycopg2": Psycopg2Lib, "sqlalchemy": SqlalchemyLib}
    configs = {"psycopg2": ["defaults"], "sqlalchemy": ["defaults", "reset-unlock-all"]}
    if len(sys.argv) != 3 or sys.argv[1] not in libs or sys.argv[2] not in configs[sys.argv[1]]:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    # Ctrl-C in the terminal reaches the whole process group: stay until the
    # harness closes our stdin, so it can still close its pools.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    lib = SqlalchemyLib(sys.argv[2]) if sys.argv[1] == "sqlalchemy" else libs[sys.argv[1]]()
    Adapter(lib).serve()


if __name__ == "__main__":
    main()
