/*
 * locklab driver adapter for HikariCP with pgjdbc (Java).
 *
 * Speaks locklab's driver protocol, version 1 (docs/src/protocol.md): one JSON
 * object per line on stdin (requests) and stdout (answers, flushed each), many
 * requests in flight at once; each request runs in a thread of its own (a
 * cached pool of daemon threads), as a Java service runs each request's
 * JDBC calls on a thread. Diagnostics go to stderr (HikariCP logs through
 * slf4j-simple at warn level there); System.out is pointed at stderr so that
 * nothing but answers reaches stdout.
 *
 * usage: java -jar locklab-adapter.jar defaults
 *
 * "defaults": a HikariDataSource with only jdbcUrl, username/password,
 * maximumPoolSize = max_size and connectionTimeout = checkout_timeout_ms
 * (HikariCP's minimum is 250 ms: a smaller bound becomes 250 ms) set;
 * HikariCP's own defaults otherwise: autoCommit true, minimumIdle =
 * maximumPoolSize (the pool fills to max_size and keeps it), no
 * connectionTestQuery (JDBC4 isValid() on a checkout of a connection idle
 * for more than 500 ms), maxLifetime 30 min. pgjdbc gets ApplicationName,
 * options (-c name=value …) and binaryTransfer=false, so that every value
 * comes back in PostgreSQL's text format (getString returns the server's text).
 *
 * begin / commit / rollback go through JDBC's transaction API:
 * setAutoCommit(false) (pgjdbc sends BEGIN with the next statement), then
 * commit() / rollback() and setAutoCommit(true); where the connection is in
 * autocommit (no begin through the API) the statement is sent as SQL.
 *
 * Giving up on a call, the JDBC way:
 *  - query timeout_ms: Statement.cancel() from a timer after timeout_ms (what
 *    Statement.setQueryTimeout does inside pgjdbc, at millisecond resolution):
 *    pgjdbc sends a cancel request, the statement ends with 57014, and the
 *    answer is gave_up once the call has returned;
 *  - cancel: Statement.cancel() on the statement in flight;
 *  - drop of a running statement: stop waiting (a JDBC call cannot be
 *    interrupted by Thread.interrupt(), so Future.cancel(true) only stops the
 *    waiting): answered dropped at once, the call runs on in its thread and
 *    the connection stays busy until it ends;
 *  - checkout timeout_ms / drop: the waiting thread is interrupted (HikariCP's
 *    getConnection gives up on interrupt); a connection granted anyway goes
 *    back to the pool;
 *  - abandon: the connection goes back to the pool (Connection.close(), the
 *    try-with-resources of its owner) as soon as its call in flight, if any,
 *    has ended; answered at once, without waiting for that call;
 *  - return timeout_ms, commit()/rollback() timeout_ms: stop waiting.
 */

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.io.BufferedOutputStream;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.SQLWarning;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.ReentrantLock;
import org.postgresql.PGConnection;
import org.postgresql.util.PSQLException;
import org.postgresql.util.PSQLWarning;
import org.postgresql.util.ServerErrorMessage;

public final class HikariAdapter {
    static final int PROTOCOL = 1;
    /** HikariCP refuses a connectionTimeout below this (IllegalArgumentException). */
    static final long MIN_CONNECTION_TIMEOUT_MS = 250;

    static final Object OUT_LOCK = new Object();
    static PrintStream out;

    static final ExecutorService workers = Executors.newCachedThreadPool(daemon("locklab-call"));
    static final ScheduledExecutorService timers = Executors.newScheduledThreadPool(1, daemon("locklab-timer"));

    static final Map<String, Pool> pools = new ConcurrentHashMap<>();
    static final Map<String, Conn> conns = new ConcurrentHashMap<>();
    /** Requests in flight, by id. */
    static final Map<Long, Call> calls = new ConcurrentHashMap<>();

    static void log(String msg) {
        System.err.println("hikaricp-adapter: " + msg);
        System.err.flush();
    }

    static java.util.concurrent.ThreadFactory daemon(String name) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, name + "-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }

    // ---- requests and answers ----

    /** A failure answered as `error`. */
    static final class Fail extends Exception {
        final String kind;
        final String sqlstate;
        Double elapsedMs;

        Fail(String kind, String message, String sqlstate) {
            super(message);
            this.kind = kind;
            this.sqlstate = sqlstate;
        }

        static Fail protocol(String message) {
            return new Fail("protocol", message, null);
        }

        /** A server error (ErrorResponse) is `db`; anything else `client`. */
        static Fail of(SQLException e) {
            if (e instanceof PSQLException) {
                ServerErrorMessage sem = ((PSQLException) e).getServerErrorMessage();
                if (sem != null && sem.getSQLState() != null) {
                    String msg = sem.getMessage() != null ? sem.getMessage() : e.getMessage();
                    return new Fail("db", msg, sem.getSQLState());
                }
            }
            String msg = e.getMessage() != null ? e.getMessage() : e.getClass().getName();
            return new Fail("client", msg, null);
        }
    }

    /** A request in flight: answered exactly once (ok, error or dropped). */
    static final class Call {
        final Long id;
        final String op;
        final String conn;
        boolean answered; // guarded by OUT_LOCK
        volatile boolean dropped;
        /** 0 running, 1 finished, 2 given up (checkout: decides who keeps a granted connection). */
        final AtomicInteger state = new AtomicInteger();
        volatile Thread thread;
        final java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(1);

        Call(Long id, String op, String conn) {
            this.id = id;
            this.op = op;
            this.conn = conn;
        }

        /** Gives up a call that can be interrupted (a checkout): true if it was still running. */
        boolean giveUp() {
            if (state.compareAndSet(0, 2)) {
                Thread t = thread;
                if (t != null) t.interrupt();
                return true;
            }
            return false;
        }
    }

    static void send(Map<String, Object> msg) {
        String line = Json.write(msg);
        synchronized (OUT_LOCK) {
            out.print(line);
            out.print('\n');
            out.flush();
        }
    }

    /** Answers `call` unless it has been answered already (by a drop). */
    static boolean answer(Call call, Map<String, Object> msg) {
        String line = Json.write(msg);
        synchronized (OUT_LOCK) {
            if (call.answered) return false;
            call.answered = true;
            out.print(line);
            out.print('\n');
            out.flush();
            return true;
        }
    }

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    static boolean answerDropped(Call call) {
        call.dropped = true;
        return answer(call, obj("id", call.id, "dropped", true));
    }

    // ---- pools and connections ----

    static final class Pool {
        final String id;
        final HikariDataSource ds;

        Pool(String id, HikariDataSource ds) {
            this.id = id;
            this.ds = ds;
        }
    }

    static final class Conn {
        final String id;
        final Pool pool;
        final Connection proxy; // HikariCP's ProxyConnection
        final Connection physical; // pgjdbc's PgConnection behind it
        final int pid;
        /** Held by the call running on the connection (a dropped call keeps it until it ends). */
        final ReentrantLock busy = new ReentrantLock(true);
        volatile Statement current;
        volatile Call inflight;

        Conn(String id, Pool pool, Connection proxy) throws SQLException {
            this.id = id;
            this.pool = pool;
            this.proxy = proxy;
            PGConnection pg = proxy.unwrap(PGConnection.class);
            this.physical = (Connection) pg;
            this.pid = pg.getBackendPID();
        }
    }

    static String str(Map<String, Object> req, String key) throws Fail {
        Object v = req.get(key);
        if (!(v instanceof String)) throw Fail.protocol("missing or non-string field '" + key + "'");
        return (String) v;
    }

    static Long num(Map<String, Object> req, String key) throws Fail {
        Object v = req.get(key);
        if (v == null) return null;
        if (v instanceof Number) return ((Number) v).longValue();
        throw Fail.protocol("field '" + key + "' is not a number");
    }

    static Conn conn(Map<String, Object> req) throws Fail {
        String id = str(req, "conn");
        Conn c = conns.get(id);
        if (c == null) throw Fail.protocol("no checked-out connection '" + id + "'");
        return c;
    }

    static Pool pool(Map<String, Object> req) throws Fail {
        String id = str(req, "pool");
        Pool p = pools.get(id);
        if (p == null) throw Fail.protocol("no pool '" + id + "'");
        return p;
    }

    // ---- ops ----

    static Map<String, Object> hello() {
        String jdk = System.getProperty("java.vm.name", "Java") + " " + System.getProperty("java.runtime.version", System.getProperty("java.version"));
        return obj(
                "protocol", PROTOCOL,
                "library", "HikariCP",
                "version", hikariVersion(),
                "details", "pgjdbc " + org.postgresql.util.DriverInfo.DRIVER_VERSION + ", " + jdk,
                "pid", ProcessHandle.current().pid(),
                "cancel", true);
    }

    static String hikariVersion() {
        try (java.io.InputStream in = HikariDataSource.class.getResourceAsStream("/META-INF/maven/com.zaxxer/HikariCP/pom.properties")) {
            if (in != null) {
                Properties p = new Properties();
                p.load(in);
                String v = p.getProperty("version");
                if (v != null) return v;
            }
        } catch (java.io.IOException e) {
            // fall through
        }
        String v = HikariDataSource.class.getPackage().getImplementationVersion();
        return v != null ? v : "unknown";
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> openPool(Map<String, Object> req, Call call) throws Fail {
        String id = str(req, "pool");
        if (pools.containsKey(id)) throw Fail.protocol("pool '" + id + "' exists already");
        Object s = req.get("spec");
        if (!(s instanceof Map)) throw Fail.protocol("missing spec");
        Map<String, Object> spec = (Map<String, Object>) s;
        Long maxSize = num(req, "max_size");
        Long checkoutMs = num(req, "checkout_timeout_ms");
        String host = str(spec, "host");
        if (host.indexOf(':') >= 0 && !host.startsWith("[")) host = "[" + host + "]";
        HikariConfig cfg = new HikariConfig();
        cfg.setJdbcUrl("jdbc:postgresql://" + host + ":" + num(spec, "port") + "/"
                + URLEncoder.encode(str(spec, "dbname"), StandardCharsets.UTF_8));
        cfg.setUsername(str(spec, "user"));
        if (spec.get("password") instanceof String) cfg.setPassword((String) spec.get("password"));
        cfg.setMaximumPoolSize((int) Math.max(1, maxSize == null ? 1 : maxSize));
        cfg.setConnectionTimeout(Math.max(MIN_CONNECTION_TIMEOUT_MS, checkoutMs == null ? 30_000 : checkoutMs));
        cfg.addDataSourceProperty("ApplicationName", str(spec, "application_name"));
        cfg.addDataSourceProperty("binaryTransfer", "false");
        Object opts = spec.get("options");
        if (opts instanceof List && !((List<Object>) opts).isEmpty()) {
            StringBuilder sb = new StringBuilder();
            for (Object o : (List<Object>) opts) {
                List<Object> kv = (List<Object>) o;
                if (sb.length() > 0) sb.append(' ');
                sb.append("-c ").append(kv.get(0)).append('=').append(kv.get(1));
            }
            cfg.addDataSourceProperty("options", sb.toString());
        }
        HikariDataSource ds;
        try {
            ds = new HikariDataSource(cfg);
        } catch (RuntimeException e) {
            Throwable cause = e.getCause();
            if (cause instanceof SQLException) throw Fail.of((SQLException) cause);
            throw new Fail("client", String.valueOf(e.getMessage()), null);
        }
        if (call.dropped) {
            ds.close();
            return obj();
        }
        pools.put(id, new Pool(id, ds));
        return obj();
    }

    static Map<String, Object> checkout(Map<String, Object> req, Call call) throws Fail {
        Pool p = pool(req);
        String cid = str(req, "conn");
        Long timeoutMs = num(req, "timeout_ms");
        ScheduledFuture<?> timer = null;
        if (timeoutMs != null) timer = timers.schedule(call::giveUp, timeoutMs, TimeUnit.MILLISECONDS);
        Connection c = null;
        SQLException err = null;
        try {
            c = p.ds.getConnection();
        } catch (SQLException e) {
            err = e;
        } finally {
            if (timer != null) timer.cancel(false);
        }
        if (!call.state.compareAndSet(0, 1)) {
            // Given up (timeout_ms or drop): a connection granted anyway goes back.
            Thread.interrupted();
            closeQuietly(c);
            if (call.dropped) return null;
            return obj("gave_up", true);
        }
        if (err != null) throw Fail.of(err);
        try {
            Conn conn = new Conn(cid, p, c);
            if (!pools.containsKey(p.id)) {
                closeQuietly(c);
                throw Fail.protocol("pool '" + p.id + "' was closed");
            }
            conns.put(cid, conn);
            return obj("pid", conn.pid);
        } catch (SQLException e) {
            closeQuietly(c);
            throw Fail.of(e);
        }
    }

    static void closeQuietly(Connection c) {
        if (c == null) return;
        try {
            c.close();
        } catch (SQLException e) {
            log("closing a connection: " + e.getMessage());
        }
    }

    /** Runs `sql` (one or several statements) and collects every result's rows. */
    static Map<String, Object> runSql(Conn c, Call call, String sql, Long timeoutMs) throws Fail {
        long t0 = System.nanoTime();
        Statement st;
        try {
            st = c.proxy.createStatement();
        } catch (SQLException e) {
            Fail f = Fail.of(e);
            f.elapsedMs = ms(t0);
            throw f;
        }
        c.current = st;
        AtomicBoolean timedOut = new AtomicBoolean();
        ScheduledFuture<?> timer = null;
        if (timeoutMs != null) {
            timer = timers.schedule(() -> {
                timedOut.set(true);
                workers.execute(() -> {
                    try {
                        st.cancel();
                    } catch (SQLException e) {
                        log("query timeout: Statement.cancel() failed: " + e.getMessage());
                    }
                });
            }, timeoutMs, TimeUnit.MILLISECONDS);
        }
        List<String> columns = new ArrayList<>();
        List<Object> rows = new ArrayList<>();
        List<Object> notices = new ArrayList<>();
        try {
            boolean isRs = st.execute(sql);
            while (true) {
                if (isRs) {
                    try (ResultSet rs = st.getResultSet()) {
                        ResultSetMetaData md = rs.getMetaData();
                        int n = md.getColumnCount();
                        if (n > 0) {
                            columns = new ArrayList<>();
                            for (int i = 1; i <= n; i++) columns.add(md.getColumnLabel(i));
                        }
                        while (rs.next()) {
                            List<Object> row = new ArrayList<>(n);
                            for (int i = 1; i <= n; i++) row.add(rs.getString(i));
                            rows.add(row);
                        }
                    }
                } else if (st.getUpdateCount() == -1) {
                    break;
                }
                isRs = st.getMoreResults();
            }
            for (SQLWarning w = st.getWarnings(); w != null; w = w.getNextWarning()) notices.add(notice(w));
        } catch (SQLException e) {
            double elapsed = ms(t0);
            if (timer != null) timer.cancel(false);
            if (timedOut.get()) return obj("gave_up", true, "elapsed_ms", elapsed);
            Fail f = Fail.of(e);
            f.elapsedMs = elapsed;
            throw f;
        } finally {
            if (timer != null) timer.cancel(false);
            c.current = null;
            try {
                st.close();
            } catch (SQLException e) {
                // the connection may be gone; the next call says so
            }
        }
        return obj("columns", columns, "rows", rows, "notices", notices, "elapsed_ms", ms(t0));
    }

    static String notice(SQLWarning w) {
        if (w instanceof PSQLWarning) {
            ServerErrorMessage sem = ((PSQLWarning) w).getServerErrorMessage();
            if (sem != null) return sem.getSeverity() + ": " + sem.getMessage();
        }
        return "WARNING: " + w.getMessage();
    }

    static double ms(long t0) {
        return (System.nanoTime() - t0) / 1e6;
    }

    static Map<String, Object> query(Map<String, Object> req, Call call) throws Fail {
        Conn c = conn(req);
        String sql = str(req, "sql");
        Long timeoutMs = num(req, "timeout_ms");
        c.busy.lock();
        try {
            if (call.dropped) return null;
            return runSql(c, call, sql, timeoutMs);
        } finally {
            c.busy.unlock();
        }
    }

    /** begin / commit / rollback through JDBC's transaction API, as SQL in autocommit. */
    static Map<String, Object> transaction(Map<String, Object> req, Call call) throws Fail {
        Conn c = conn(req);
        String op = call.op;
        Long timeoutMs = num(req, "timeout_ms");
        c.busy.lock();
        try {
            if (call.dropped) return null;
            boolean auto;
            try {
                auto = c.proxy.getAutoCommit();
            } catch (SQLException e) {
                throw Fail.of(e);
            }
            if (op.equals("begin") ? !auto : auto) {
                // Already in a JDBC transaction (begin), or none through the API (commit/rollback): SQL.
                return runSql(c, call, op, timeoutMs);
            }
        } finally {
            c.busy.unlock();
        }
        return bounded(timeoutMs, () -> {
            c.busy.lock();
            long t0 = System.nanoTime();
            try {
                if (op.equals("begin")) {
                    c.proxy.setAutoCommit(false);
                } else {
                    try {
                        if (op.equals("commit")) c.proxy.commit();
                        else c.proxy.rollback();
                    } finally {
                        c.proxy.setAutoCommit(true);
                    }
                }
                return obj("columns", List.of(), "rows", List.of(), "notices", List.of(), "elapsed_ms", ms(t0));
            } catch (SQLException e) {
                Fail f = Fail.of(e);
                f.elapsedMs = ms(t0);
                throw f;
            } finally {
                c.busy.unlock();
            }
        });
    }

    interface Work {
        Map<String, Object> run() throws Fail;
    }

    /** `work`, waited for at most timeoutMs (null: no bound); gave_up when the bound elapses (the work goes on). */
    static Map<String, Object> bounded(Long timeoutMs, Work work) throws Fail {
        if (timeoutMs == null) return work.run();
        long t0 = System.nanoTime();
        Future<Map<String, Object>> f = workers.submit(() -> work.run());
        try {
            return f.get(timeoutMs, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            return obj("gave_up", true, "elapsed_ms", ms(t0));
        } catch (java.util.concurrent.ExecutionException e) {
            if (e.getCause() instanceof Fail) throw (Fail) e.getCause();
            throw new Fail("client", String.valueOf(e.getCause()), null);
        } catch (InterruptedException e) {
            throw new Fail("client", "interrupted", null);
        }
    }

    static Map<String, Object> giveBack(Map<String, Object> req, Call call) throws Fail {
        Conn c = conn(req);
        conns.remove(c.id);
        Long timeoutMs = num(req, "timeout_ms");
        Map<String, Object> r = bounded(timeoutMs, () -> {
            c.busy.lock();
            try {
                // A connection HikariCP found broken (SQLSTATE 08…, 57P01…) is
                // already evicted: the proxy is closed and close() does nothing.
                boolean evicted = c.proxy.isClosed();
                c.proxy.close();
                boolean closed = evicted || c.physical.isClosed();
                return obj("returned", closed ? "closed" : "to_pool");
            } catch (SQLException e) {
                throw Fail.of(e);
            } finally {
                c.busy.unlock();
            }
        });
        if (r.containsKey("elapsed_ms")) r.remove("elapsed_ms"); // ReturnOk has no elapsed_ms
        return r;
    }

    static Map<String, Object> cancel(Map<String, Object> req) throws Fail {
        Conn c = conn(req);
        Statement st = c.current;
        if (st != null) {
            try {
                st.cancel();
            } catch (SQLException e) {
                throw Fail.of(e);
            }
        }
        return obj();
    }

    static Map<String, Object> drop(Map<String, Object> req) throws Fail {
        Long target = num(req, "target");
        Call t = target == null ? null : calls.get(target);
        if (t == null) return obj();
        if (t.op.equals("checkout")) {
            t.dropped = true;
            if (t.giveUp()) {
                answerDropped(t);
            } else {
                await(t, 10_000);
            }
        } else {
            // A JDBC call cannot be interrupted: stop waiting for it.
            answerDropped(t);
        }
        return obj();
    }

    static void await(Call t, long ms) {
        try {
            t.done.await(ms, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** The owner went away: its try-with-resources closes the connection once its call ends. */
    static Map<String, Object> abandon(Map<String, Object> req) throws Fail {
        Conn c = conn(req);
        conns.remove(c.id);
        Call inflight = c.inflight;
        if (inflight != null) answerDropped(inflight);
        workers.execute(() -> {
            c.busy.lock();
            try {
                c.proxy.close();
            } catch (SQLException e) {
                log("abandon " + c.id + ": close() failed: " + e.getMessage());
            } finally {
                c.busy.unlock();
            }
        });
        return obj();
    }

    static Map<String, Object> closePool(Map<String, Object> req) throws Fail {
        String id = str(req, "pool");
        Pool p = pools.remove(id);
        if (p == null) return obj();
        for (Conn c : new ArrayList<>(conns.values())) {
            if (c.pool != p) continue;
            conns.remove(c.id);
            Call inflight = c.inflight;
            if (inflight != null) answerDropped(inflight);
        }
        // HikariCP's shutdown aborts (Connection.abort) the connections still in use.
        p.ds.close();
        return obj();
    }

    static Map<String, Object> dispatch(Map<String, Object> req, Call call) throws Fail {
        switch (call.op) {
            case "hello":
                return hello();
            case "ping":
                return obj();
            case "open_pool":
                return openPool(req, call);
            case "close_pool":
                return closePool(req);
            case "checkout":
                return checkout(req, call);
            case "query":
                return query(req, call);
            case "begin":
            case "commit":
            case "rollback":
                return transaction(req, call);
            case "return":
                return giveBack(req, call);
            case "cancel":
                return cancel(req);
            case "drop":
                return drop(req);
            case "abandon":
                return abandon(req);
            case "guard":
                conn(req);
                throw new Fail("unsupported", "HikariCP and JDBC have no advisory-lock guard API", null);
            case "library":
                throw new Fail("unsupported", "no library call here", null);
            default:
                throw Fail.protocol("unknown request '" + call.op + "'");
        }
    }

    static void handle(Map<String, Object> req, Call call) {
        call.thread = Thread.currentThread();
        try {
            Map<String, Object> ok = dispatch(req, call);
            if (ok != null) answer(call, obj("id", call.id, "ok", ok));
        } catch (Fail f) {
            Map<String, Object> err = obj("kind", f.kind, "message", f.getMessage());
            if (f.sqlstate != null) err.put("sqlstate", f.sqlstate);
            Map<String, Object> a = obj("id", call.id, "error", err);
            if (f.elapsedMs != null) a.put("elapsed_ms", f.elapsedMs);
            answer(call, a);
        } catch (Throwable t) {
            log("request " + call.id + " (" + call.op + "): " + t);
            answer(call, obj("id", call.id, "error", obj("kind", "client", "message", String.valueOf(t))));
        } finally {
            if (call.id != null) calls.remove(call.id);
            if (call.conn != null) {
                Conn c = conns.get(call.conn);
                if (c != null && c.inflight == call) c.inflight = null;
            }
            call.thread = null;
            call.done.countDown();
        }
    }

    static final java.util.Set<String> CALL_OPS = java.util.Set.of("query", "begin", "commit", "rollback");

    @SuppressWarnings("unchecked")
    public static void main(String[] args) throws Exception {
        if (args.length != 1 || !args[0].equals("defaults")) {
            System.err.println("usage: java -jar locklab-adapter.jar defaults");
            System.exit(2);
        }
        // Answers only on stdout: keep the real one, send everything else to stderr.
        out = new PrintStream(new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
        watchParent();

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8), 1 << 16);
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            Object parsed;
            try {
                parsed = Json.parse(line);
                if (!(parsed instanceof Map)) throw new IllegalArgumentException("not an object");
            } catch (IllegalArgumentException e) {
                log("a request that is not a JSON object (" + e.getMessage() + "): " + (line.length() > 200 ? line.substring(0, 200) : line));
                send(obj("id", null, "error", obj("kind", "protocol", "message", "not a JSON object: " + e.getMessage())));
                continue;
            }
            Map<String, Object> req = (Map<String, Object>) parsed;
            Object rawId = req.get("id");
            Long id = rawId instanceof Number ? ((Number) rawId).longValue() : null;
            Object rawOp = req.get("op");
            String op = rawOp instanceof String ? (String) rawOp : String.valueOf(rawOp);
            String connId = req.get("conn") instanceof String ? (String) req.get("conn") : null;
            Call call = new Call(id, op, CALL_OPS.contains(op) ? connId : null);
            if (id != null) calls.put(id, call);
            if (call.conn != null) {
                Conn c = conns.get(call.conn);
                if (c != null) c.inflight = call;
            }
            workers.execute(() -> handle(req, call));
        }
        // stdin closed: close the pools (a few seconds at most) and exit.
        Thread closer = new Thread(() -> {
            for (Pool p : new ArrayList<>(pools.values())) {
                try {
                    p.ds.close();
                } catch (RuntimeException e) {
                    log("closing pool " + p.id + ": " + e);
                }
            }
        });
        closer.setDaemon(true);
        closer.start();
        closer.join(4000);
        out.flush();
        System.exit(0);
    }

    /** Exits when the parent goes away (stdin may outlive it behind a wrapper). */
    static void watchParent() {
        long parent = ProcessHandle.current().parent().map(ProcessHandle::pid).orElse(-1L);
        Thread t = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(500);
                } catch (InterruptedException e) {
                    return;
                }
                long now = ProcessHandle.current().parent().map(ProcessHandle::pid).orElse(-1L);
                boolean alive = ProcessHandle.of(parent).map(ProcessHandle::isAlive).orElse(false);
                if (now != parent || !alive) {
                    log("the harness is gone; exiting");
                    Runtime.getRuntime().halt(0);
                }
            }
        }, "locklab-parent-watch");
        t.setDaemon(true);
        t.start();
    }

    /** A small JSON reader and writer: the protocol's lines are plain objects. */
    static final class Json {
        private final String s;
        private int i;

        private Json(String s) {
            this.s = s;
        }

        static Object parse(String s) {
            Json j = new Json(s);
            j.ws();
            Object v = j.value();
            j.ws();
            if (j.i != s.length()) throw j.err("trailing characters");
            return v;
        }

        private IllegalArgumentException err(String what) {
            return new IllegalArgumentException(what + " at offset " + i);
        }

        private void ws() {
            while (i < s.length()) {
                char c = s.charAt(i);
                if (c == ' ' || c == '\t' || c == '\n' || c == '\r') i++;
                else break;
            }
        }

        private Object value() {
            if (i >= s.length()) throw err("unexpected end");
            char c = s.charAt(i);
            switch (c) {
                case '{': {
                    i++;
                    Map<String, Object> m = new LinkedHashMap<>();
                    ws();
                    if (peek('}')) return m;
                    while (true) {
                        ws();
                        if (i >= s.length() || s.charAt(i) != '"') throw err("expected a key");
                        String k = string();
                        ws();
                        expect(':');
                        ws();
                        m.put(k, value());
                        ws();
                        if (peek('}')) return m;
                        expect(',');
                    }
                }
                case '[': {
                    i++;
                    List<Object> l = new ArrayList<>();
                    ws();
                    if (peek(']')) return l;
                    while (true) {
                        ws();
                        l.add(value());
                        ws();
                        if (peek(']')) return l;
                        expect(',');
                    }
                }
                case '"':
                    return string();
                case 't':
                    word("true");
                    return Boolean.TRUE;
                case 'f':
                    word("false");
                    return Boolean.FALSE;
                case 'n':
                    word("null");
                    return null;
                default:
                    return number();
            }
        }

        private boolean peek(char c) {
            if (i < s.length() && s.charAt(i) == c) {
                i++;
                return true;
            }
            return false;
        }

        private void expect(char c) {
            if (!peek(c)) throw err("expected '" + c + "'");
        }

        private void word(String w) {
            if (!s.startsWith(w, i)) throw err("unexpected token");
            i += w.length();
        }

        private Object number() {
            int start = i;
            if (peek('-')) { /* sign */ }
            boolean frac = false;
            while (i < s.length()) {
                char c = s.charAt(i);
                if (c >= '0' && c <= '9') i++;
                else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
                    frac = true;
                    i++;
                } else break;
            }
            String t = s.substring(start, i);
            if (t.isEmpty() || t.equals("-")) throw err("unexpected character");
            try {
                if (!frac) {
                    try {
                        return Long.parseLong(t);
                    } catch (NumberFormatException e) {
                        return Double.parseDouble(t); // beyond i64 (a u64 id): lossy but usable
                    }
                }
                return Double.parseDouble(t);
            } catch (NumberFormatException e) {
                throw err("bad number");
            }
        }

        private String string() {
            i++; // opening quote
            StringBuilder sb = new StringBuilder();
            while (true) {
                if (i >= s.length()) throw err("unterminated string");
                char c = s.charAt(i++);
                if (c == '"') return sb.toString();
                if (c != '\\') {
                    sb.append(c);
                    continue;
                }
                if (i >= s.length()) throw err("unterminated escape");
                char e = s.charAt(i++);
                switch (e) {
                    case '"': sb.append('"'); break;
                    case '\\': sb.append('\\'); break;
                    case '/': sb.append('/'); break;
                    case 'b': sb.append('\b'); break;
                    case 'f': sb.append('\f'); break;
                    case 'n': sb.append('\n'); break;
                    case 'r': sb.append('\r'); break;
                    case 't': sb.append('\t'); break;
                    case 'u':
                        if (i + 4 > s.length()) throw err("bad \\u escape");
                        try {
                            sb.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
                        } catch (NumberFormatException x) {
                            throw err("bad \\u escape");
                        }
                        i += 4;
                        break;
                    default:
                        throw err("bad escape");
                }
            }
        }

        static String write(Object v) {
            StringBuilder sb = new StringBuilder();
            write(sb, v);
            return sb.toString();
        }

        @SuppressWarnings("unchecked")
        private static void write(StringBuilder sb, Object v) {
            if (v == null) {
                sb.append("null");
            } else if (v instanceof String) {
                quote(sb, (String) v);
            } else if (v instanceof Boolean) {
                sb.append(v.toString());
            } else if (v instanceof Double || v instanceof Float) {
                double d = ((Number) v).doubleValue();
                sb.append(Double.isFinite(d) ? Double.toString(d) : "null");
            } else if (v instanceof Number) {
                sb.append(v.toString());
            } else if (v instanceof Map) {
                sb.append('{');
                boolean first = true;
                for (Map.Entry<String, Object> e : ((Map<String, Object>) v).entrySet()) {
                    if (!first) sb.append(',');
                    first = false;
                    quote(sb, e.getKey());
                    sb.append(':');
                    write(sb, e.getValue());
                }
                sb.append('}');
            } else if (v instanceof List) {
                sb.append('[');
                boolean first = true;
                for (Object o : (List<Object>) v) {
                    if (!first) sb.append(',');
                    first = false;
                    write(sb, o);
                }
                sb.append(']');
            } else {
                quote(sb, v.toString());
            }
        }

        private static void quote(StringBuilder sb, String s) {
            sb.append('"');
            for (int k = 0; k < s.length(); k++) {
                char c = s.charAt(k);
                switch (c) {
                    case '"': sb.append("\\\""); break;
                    case '\\': sb.append("\\\\"); break;
                    case '\n': sb.append("\\n"); break;
                    case '\r': sb.append("\\r"); break;
                    case '\t': sb.append("\\t"); break;
                    default:
                        if (c < 0x20 || c == 0x2028 || c == 0x2029) sb.append(String.format("\\u%04x", (int) c));
                        else sb.append(c);
                }
            }
            sb.append('"');
        }
    }
}
