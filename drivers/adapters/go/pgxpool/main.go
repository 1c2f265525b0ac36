// Command pgxpool-adapter is locklab's driver adapter for pgx v5's pool,
// github.com/jackc/pgx/v5/pgxpool, speaking locklab's driver protocol,
// version 1 (docs/src/protocol.md): one JSON object per line on stdin
// (requests) and stdout (answers), each request handled in a goroutine of its
// own and answered by its id, in any order. Diagnostics go to stderr.
//
// "Defaults": pgxpool.NewWithConfig with the config of pgxpool.ParseConfig
// (a keyword/value string of host, port, user, password, dbname), with only
// MaxConns set (to max_size) and the spec's application_name and options as
// run-time parameters; pgxpool's own defaults otherwise: MinConns 0 (lazy),
// health check every minute, ping on acquire after 1 s idle, max lifetime 1 h,
// max idle time 30 min, no AfterRelease reset (Release destroys a connection
// that is closed, busy or not idle in a transaction: pgxpool/conn.go),
// statement cache (QueryExecModeCacheStatement). The only hook is OnNotice,
// which collects notices for the answers.
//
// "after-release-unlock-all" (the argument): the same, with the pool's
// AfterRelease hook running `select pg_advisory_unlock_all()` on every
// connection released to the pool (pgxpool.Config.AfterRelease: "called
// after a connection is released, but before it is returned to the pool";
// false destroys the connection: so does a failed unlock here).
//
// Giving up on a call is Go's way: the call runs under a context.Context,
// with context.WithTimeout for `timeout_ms` and a cancel func for `drop`,
// `abandon` and `close_pool`. pgx then interrupts the call itself (its
// default DeadlineContextWatcherHandler sets a past deadline on the socket;
// the interrupted read closes the connection, and pgconn's asyncClose sends a
// cancel request and Terminate): answered once pgconn's clean-up is done.
// `cancel` is pgconn's PgConn.CancelRequest. Queries run through
// pgxpool.Conn.Query, one statement per call (the extended protocol), with
// the results asked for in text format.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

const protocolVersion = 1

// Set at build time (-ldflags -X) from the Debian packages' versions.
var (
	pgxVersion    = "unknown"
	puddleVersion = "unknown"
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pgxpool-adapter: "+format+"\n", args...)
}

type spec struct {
	Host            string      `json:"host"`
	Port            int         `json:"port"`
	User            string      `json:"user"`
	Password        *string     `json:"password"`
	DBName          string      `json:"dbname"`
	ApplicationName string      `json:"application_name"`
	Options         [][2]string `json:"options"`
}

type request struct {
	ID                *uint64 `json:"id"`
	Op                string  `json:"op"`
	Pool              string  `json:"pool"`
	Conn              string  `json:"conn"`
	SQL               string  `json:"sql"`
	Spec              *spec   `json:"spec"`
	MaxSize           int64   `json:"max_size"`
	CheckoutTimeoutMs uint64  `json:"checkout_timeout_ms"`
	TimeoutMs         *uint64 `json:"timeout_ms"`
	Target            *uint64 `json:"target"`
	Key               int64   `json:"key"`
	End               string  `json:"end"`
}

// failure is an error answer: kind db (with sqlstate), client, unsupported
// or protocol.
type failure struct {
	kind, message, sqlstate string
	elapsedMs               *float64
}

func (f *failure) Error() string { return f.message }

func protocolErr(format string, args ...any) *failure {
	return &failure{kind: "protocol", message: fmt.Sprintf(format, args...)}
}

// errDropped marks a call given up by drop / abandon / close_pool.
var errDropped = errors.New("dropped")

// libFailure classifies an error of pgx: a server error is `db`.
func libFailure(err error) *failure {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return &failure{kind: "db", message: pgErr.Message, sqlstate: pgErr.Code}
	}
	return &failure{kind: "client", message: err.Error()}
}

// call is one request in flight.
type call struct {
	id      uint64
	op      string
	pool    string // checkout: its pool
	ctx     context.Context
	cancel  context.CancelFunc
	dropped atomic.Bool
	done    chan struct{} // closed once answered
}

// giveUp cancels the call's context (drop's analogue of a dropped future) and
// waits until it has answered.
func (c *call) giveUp() {
	c.dropped.Store(true)
	c.cancel()
	<-c.done
}

type poolEntry struct {
	pool *pgxpool.Pool
}

type connEntry struct {
	id     string
	poolID string
	pc     *pgxpool.Conn
	raw    *pgx.Conn
	tx     pgx.Tx // started by `begin` through pgx's Tx API
	busy   *call  // query / begin / commit / rollback in flight
}

type adapter struct {
	mu       sync.Mutex
	pools    map[string]*poolEntry
	conns    map[string]*connEntry
	inflight map[uint64]*call
	sinks    map[*pgconn.PgConn]*[]string // notices of the query in flight
	outMu    sync.Mutex
	out      io.Writer
}

func newAdapter() *adapter {
	return &adapter{
		pools:    map[string]*poolEntry{},
		conns:    map[string]*connEntry{},
		inflight: map[uint64]*call{},
		sinks:    map[*pgconn.PgConn]*[]string{},
		out:      os.Stdout,
	}
}

func (a *adapter) send(msg map[string]any) {
	line, err := json.Marshal(msg)
	if err != nil {
		logf("cannot encode an answer: %v", err)
		return
	}
	line = append(line, '\n')
	a.outMu.Lock()
	defer a.outMu.Unlock()
	if _, err := a.out.Write(line); err != nil {
		logf("stdout closed (%v); exiting", err)
		os.Exit(0)
	}
}

func (a *adapter) onNotice(pc *pgconn.PgConn, n *pgconn.Notice) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if sink := a.sinks[pc]; sink != nil {
		*sink = append(*sink, n.Severity+": "+n.Message)
	}
}

func msSince(t0 time.Time) float64 { return float64(time.Since(t0).Nanoseconds()) / 1e6 }

// settle waits for pgconn's own clean-up of a connection that the give-up
// closed (asyncClose: cancel request, Terminate, socket closed).
func settle(raw *pgx.Conn) {
	if raw == nil || !raw.IsClosed() {
		return
	}
	select {
	case <-raw.PgConn().CleanupDone():
	case <-time.After(20 * time.Second):
		logf("pgconn's clean-up of backend %d did not end within 20 s", raw.PgConn().PID())
	}
}

func (a *adapter) lookupConn(id string) (*connEntry, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.conns[id]
	if e == nil {
		return nil, protocolErr("no checked-out connection '%s'", id)
	}
	return e, nil
}

func (a *adapter) opHello(c *call, r *request) (map[string]any, error) {
	return map[string]any{
		"protocol": protocolVersion,
		"library":  "pgx",
		"version":  pgxVersion,
		"details":  fmt.Sprintf("pgxpool, %s, puddle %s", runtime.Version(), puddleVersion),
		"pid":      os.Getpid(),
		"cancel":   true,
	}, nil
}

// quoteValue quotes a value for a keyword/value connection string.
func quoteValue(v string) string {
	v = strings.ReplaceAll(v, `\`, `\\`)
	v = strings.ReplaceAll(v, `'`, `\'`)
	return "'" + v + "'"
}

func (a *adapter) opOpenPool(c *call, r *request) (map[string]any, error) {
	if r.Spec == nil {
		return nil, protocolErr("open_pool without a spec")
	}
	if r.MaxSize < 1 {
		return nil, protocolErr("max_size must be at least 1")
	}
	a.mu.Lock()
	_, exists := a.pools[r.Pool]
	a.mu.Unlock()
	if exists {
		return nil, protocolErr("pool '%s' already exists", r.Pool)
	}
	s := r.Spec
	parts := []string{
		"host=" + quoteValue(s.Host),
		fmt.Sprintf("port=%d", s.Port),
		"user=" + quoteValue(s.User),
		"dbname=" + quoteValue(s.DBName),
	}
	if s.Password != nil {
		parts = append(parts, "password="+quoteValue(*s.Password))
	}
	cfg, err := pgxpool.ParseConfig(strings.Join(parts, " "))
	if err != nil {
		return nil, libFailure(err)
	}
	cfg.MaxConns = int32(r.MaxSize)
	cfg.ConnConfig.RuntimeParams["application_name"] = s.ApplicationName
	for _, kv := range s.Options {
		cfg.ConnConfig.RuntimeParams[kv[0]] = kv[1]
	}
	cfg.ConnConfig.OnNotice = a.onNotice
	if configuration == "after-release-unlock-all" {
		cfg.AfterRelease = func(c *pgx.Conn) bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := c.Exec(ctx, "select pg_advisory_unlock_all()")
			afterReleased(c, err == nil)
			return err == nil
		}
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, libFailure(err)
	}
	a.mu.Lock()
	a.pools[r.Pool] = &poolEntry{pool: pool}
	a.mu.Unlock()
	return map[string]any{}, nil
}

func (a *adapter) opCheckout(c *call, r *request) (map[string]any, error) {
	a.mu.Lock()
	pe := a.pools[r.Pool]
	_, taken := a.conns[r.Conn]
	a.mu.Unlock()
	if pe == nil {
		return nil, protocolErr("no pool '%s'", r.Pool)
	}
	if taken {
		return nil, protocolErr("connection '%s' is already checked out", r.Conn)
	}
	// The application's bound (timeout_ms), then the pool wait's own bound:
	// pgxpool has no checkout timeout but the context.
	giveUpCtx := c.ctx
	if r.TimeoutMs != nil {
		var cancel context.CancelFunc
		giveUpCtx, cancel = context.WithTimeout(c.ctx, time.Duration(*r.TimeoutMs)*time.Millisecond)
		defer cancel()
	}
	acquireCtx, cancel := context.WithTimeout(giveUpCtx, time.Duration(r.CheckoutTimeoutMs)*time.Millisecond)
	defer cancel()
	pc, err := pe.pool.Acquire(acquireCtx)
	if err != nil {
		switch {
		case c.dropped.Load():
			return nil, errDropped
		case giveUpCtx.Err() != nil:
			return map[string]any{"gave_up": true}, nil
		case acquireCtx.Err() != nil:
			return nil, &failure{kind: "client", message: fmt.Sprintf("pgxpool.Acquire: %v (checkout_timeout_ms %d)", err, r.CheckoutTimeoutMs)}
		}
		return nil, libFailure(err)
	}
	a.mu.Lock()
	if a.pools[r.Pool] != pe {
		// The pool was closed meanwhile: the connection goes back.
		a.mu.Unlock()
		pc.Release()
		return nil, errDropped
	}
	a.conns[r.Conn] = &connEntry{id: r.Conn, poolID: r.Pool, pc: pc, raw: pc.Conn()}
	a.mu.Unlock()
	return map[string]any{"pid": pc.Conn().PgConn().PID()}, nil
}

// runSQL runs sql and returns the rows of every statement, columns of the
// last one with columns, values in text format. One statement goes through
// pgxpool.Conn.Query (the extended protocol, pgx's statement cache), asking
// for text results. Several go through pgconn's Exec as one simple Query
// message (the text protocol's results), so that the server runs them as
// one implicit transaction, as PostgreSQL does with the statements of one
// Query message (PostgreSQL docs, "Multiple Statements in a Simple Query",
// §55.2.2.1 in 17); pgx's Query would take one statement per call.
func runSQL(ctx context.Context, pc *pgxpool.Conn, sql string) ([]string, [][]*string, error) {
	stmts := splitStatements(sql)
	if len(stmts) > 1 {
		return runSimple(ctx, pc, sql)
	}
	columns := []string{}
	out := [][]*string{}
	for _, stmt := range stmts {
		rows, err := pc.Query(ctx, stmt, pgx.QueryResultFormats{pgx.TextFormatCode})
		if err != nil {
			return nil, nil, err
		}
		if fds := rows.FieldDescriptions(); len(fds) > 0 {
			columns = make([]string, len(fds))
			for i, fd := range fds {
				columns[i] = fd.Name
			}
		}
		for rows.Next() {
			raw := rows.RawValues()
			row := make([]*string, len(raw))
			for i, v := range raw {
				if v != nil {
					s := string(v)
					row[i] = &s
				}
			}
			out = append(out, row)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, err
		}
	}
	return columns, out, nil
}

// runSimple sends sql as one simple Query message through pgconn.PgConn.Exec
// and reads every result: rows of all of them, in order; columns of the
// last one with columns. The first error ends the string, as on the server.
func runSimple(ctx context.Context, pc *pgxpool.Conn, sql string) ([]string, [][]*string, error) {
	columns := []string{}
	out := [][]*string{}
	mrr := pc.Conn().PgConn().Exec(ctx, sql)
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		if fds := rr.FieldDescriptions(); len(fds) > 0 {
			columns = make([]string, len(fds))
			for i, fd := range fds {
				columns[i] = fd.Name
			}
		}
		for rr.NextRow() {
			raw := rr.Values()
			row := make([]*string, len(raw))
			for i, v := range raw {
				if v != nil {
					s := string(v)
					row[i] = &s
				}
			}
			out = append(out, row)
		}
		if _, err := rr.Close(); err != nil {
			mrr.Close()
			return nil, nil, err
		}
	}
	if err := mrr.Close(); err != nil {
		return nil, nil, err
	}
	return columns, out, nil
}

// runOnConn runs fn on e's connection with the call's context (bounded by
// timeout_ms), collecting notices and timing the library call, and answers
// as the protocol's `query` does.
func (a *adapter) runOnConn(c *call, e *connEntry, timeoutMs *uint64,
	fn func(ctx context.Context) ([]string, [][]*string, error)) (map[string]any, error) {
	ctx := c.ctx
	if timeoutMs != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(c.ctx, time.Duration(*timeoutMs)*time.Millisecond)
		defer cancel()
	}
	pgc := e.raw.PgConn()
	notices := []string{}
	a.mu.Lock()
	a.sinks[pgc] = &notices
	a.mu.Unlock()
	t0 := time.Now()
	columns, rows, err := fn(ctx)
	elapsed := msSince(t0)
	a.mu.Lock()
	delete(a.sinks, pgc)
	got := append([]string{}, notices...)
	a.mu.Unlock()
	if err != nil {
		if c.dropped.Load() {
			settle(e.raw)
			return nil, errDropped
		}
		if ctx.Err() != nil {
			settle(e.raw)
			return map[string]any{"gave_up": true, "elapsed_ms": elapsed}, nil
		}
		f := libFailure(err)
		f.elapsedMs = &elapsed
		return nil, f
	}
	return map[string]any{"columns": columns, "rows": rows, "notices": got, "elapsed_ms": elapsed}, nil
}

func (a *adapter) opQuery(c *call, r *request) (map[string]any, error) {
	e, err := a.lookupConn(r.Conn)
	if err != nil {
		return nil, err
	}
	return a.runOnConn(c, e, r.TimeoutMs, func(ctx context.Context) ([]string, [][]*string, error) {
		return runSQL(ctx, e.pc, r.SQL)
	})
}

// opTransaction: begin / commit / rollback through pgx's Tx API
// (Conn.Begin, Tx.Commit, Tx.Rollback) where it fits, as SQL otherwise
// (a `commit` with no Tx from `begin`, a second `begin`).
func (a *adapter) opTransaction(c *call, r *request) (map[string]any, error) {
	e, err := a.lookupConn(r.Conn)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	tx := e.tx
	a.mu.Unlock()
	return a.runOnConn(c, e, nil, func(ctx context.Context) ([]string, [][]*string, error) {
		var err error
		switch {
		case r.Op == "begin" && tx == nil:
			var t pgx.Tx
			t, err = e.pc.Begin(ctx)
			if err == nil {
				a.mu.Lock()
				e.tx = t
				a.mu.Unlock()
			}
		case r.Op != "begin" && tx != nil:
			a.mu.Lock()
			e.tx = nil
			a.mu.Unlock()
			if r.Op == "commit" {
				err = tx.Commit(ctx)
			} else {
				err = tx.Rollback(ctx)
			}
		default:
			return runSQL(ctx, e.pc, r.Op)
		}
		return []string{}, [][]*string{}, err
	})
}

// afterRelease: for each connection whose release waits for the
// AfterRelease hook, where to say that the hook ran and whether it kept the
// connection. pgxpool runs the hook in a goroutine of its own after Release
// has returned (pgxpool/conn.go, Release); the return ends, as the other
// columns' do, once the pool has the connection back.
var afterRelease = struct {
	sync.Mutex
	done map[*pgx.Conn]chan bool
}{done: map[*pgx.Conn]chan bool{}}

func afterReleased(c *pgx.Conn, kept bool) {
	afterRelease.Lock()
	ch := afterRelease.done[c]
	delete(afterRelease.done, c)
	afterRelease.Unlock()
	if ch != nil {
		ch <- kept
	}
}

// release gives e's connection back with pgxpool.Conn.Release and tells
// where it went. Release destroys, in the background (puddle's Destroy), a
// connection that is closed, busy or not idle ('I') in a transaction
// (pgxpool/conn.go, Release): then wait for that destroy to close it.
func (a *adapter) release(ctx context.Context, e *connEntry) (string, bool) {
	pg := e.raw.PgConn()
	destroying := e.raw.IsClosed() || pg.IsBusy() || pg.TxStatus() != 'I'
	var hook chan bool
	if !destroying && configuration == "after-release-unlock-all" {
		hook = make(chan bool, 1)
		afterRelease.Lock()
		afterRelease.done[e.raw] = hook
		afterRelease.Unlock()
	}
	e.pc.Release()
	if hook != nil {
		select {
		case kept := <-hook:
			destroying = !kept
		case <-ctx.Done():
			return "", false
		}
	}
	if !destroying {
		if e.raw.IsClosed() {
			return "closed", true
		}
		return "to_pool", true
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !e.raw.IsClosed() {
		select {
		case <-ctx.Done():
			return "", false
		case <-tick.C:
		}
	}
	select {
	case <-pg.CleanupDone():
	case <-ctx.Done():
		return "", false
	}
	return "closed", true
}

func (a *adapter) takeConn(id string) (*connEntry, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.conns[id]
	if e == nil {
		return nil, protocolErr("no checked-out connection '%s'", id)
	}
	delete(a.conns, id)
	return e, nil
}

func (a *adapter) opReturn(c *call, r *request) (map[string]any, error) {
	e, err := a.takeConn(r.Conn)
	if err != nil {
		return nil, err
	}
	ctx := c.ctx
	if r.TimeoutMs != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(c.ctx, time.Duration(*r.TimeoutMs)*time.Millisecond)
		defer cancel()
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(c.ctx, 30*time.Second)
		defer cancel()
	}
	where, ok := a.release(ctx, e)
	if !ok {
		if c.dropped.Load() {
			return nil, errDropped
		}
		return map[string]any{"gave_up": true}, nil
	}
	return map[string]any{"returned": where}, nil
}

func (a *adapter) opCancel(c *call, r *request) (map[string]any, error) {
	e, err := a.lookupConn(r.Conn)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	busy := e.busy
	a.mu.Unlock()
	if busy == nil {
		return map[string]any{}, nil // nothing in flight
	}
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	if err := e.raw.PgConn().CancelRequest(ctx); err != nil {
		return nil, &failure{kind: "client", message: err.Error()}
	}
	return map[string]any{}, nil
}

func (a *adapter) opDrop(c *call, r *request) (map[string]any, error) {
	if r.Target == nil {
		return nil, protocolErr("drop without a target")
	}
	a.mu.Lock()
	target := a.inflight[*r.Target]
	a.mu.Unlock()
	if target != nil && target != c {
		target.giveUp()
	}
	return map[string]any{}, nil
}

// abandon: the owner went away mid-call, as a goroutine whose context is
// cancelled and whose `defer conn.Release()` then runs.
func (a *adapter) abandon(id string) {
	a.mu.Lock()
	e := a.conns[id]
	var busy *call
	if e != nil {
		busy = e.busy
	}
	a.mu.Unlock()
	if e == nil {
		return
	}
	if busy != nil {
		busy.giveUp()
	}
	e, err := a.takeConn(id)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a.release(ctx, e)
}

func (a *adapter) opAbandon(c *call, r *request) (map[string]any, error) {
	if _, err := a.lookupConn(r.Conn); err != nil {
		return nil, err
	}
	a.abandon(r.Conn)
	return map[string]any{}, nil
}

func (a *adapter) opGuard(c *call, r *request) (map[string]any, error) {
	return nil, &failure{kind: "unsupported", message: "pgx has no advisory-lock guard API"}
}

func (a *adapter) opLibrary(c *call, r *request) (map[string]any, error) {
	return nil, &failure{kind: "unsupported", message: "no library call here"}
}

func (a *adapter) opPing(c *call, r *request) (map[string]any, error) {
	return map[string]any{}, nil
}

// closePool abandons the pool's connections still checked out and its
// checkouts in flight, then closes it (pgxpool.Pool.Close waits for its
// connections to be destroyed), bounded to a few seconds.
func (a *adapter) closePool(id string) bool {
	a.mu.Lock()
	pe := a.pools[id]
	var conns []string
	var checkouts []*call
	if pe != nil {
		for cid, e := range a.conns {
			if e.poolID == id {
				conns = append(conns, cid)
			}
		}
		for _, c := range a.inflight {
			if c.op == "checkout" && c.pool == id {
				checkouts = append(checkouts, c)
			}
		}
	}
	a.mu.Unlock()
	if pe == nil {
		return false
	}
	var wg sync.WaitGroup
	for _, cid := range conns {
		wg.Add(1)
		go func(cid string) { defer wg.Done(); a.abandon(cid) }(cid)
	}
	for _, c := range checkouts {
		wg.Add(1)
		go func(c *call) { defer wg.Done(); c.giveUp() }(c)
	}
	wg.Wait()
	a.mu.Lock()
	delete(a.pools, id)
	a.mu.Unlock()
	closed := make(chan struct{})
	go func() { pe.pool.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		logf("pool '%s' did not close within 5 s; left to close in the background", id)
	}
	return true
}

func (a *adapter) opClosePool(c *call, r *request) (map[string]any, error) {
	if !a.closePool(r.Pool) {
		return nil, protocolErr("no pool '%s'", r.Pool)
	}
	return map[string]any{}, nil
}

type handler func(a *adapter, c *call, r *request) (map[string]any, error)

var handlers = map[string]handler{
	"hello":      (*adapter).opHello,
	"open_pool":  (*adapter).opOpenPool,
	"checkout":   (*adapter).opCheckout,
	"query":      (*adapter).opQuery,
	"begin":      (*adapter).opTransaction,
	"commit":     (*adapter).opTransaction,
	"rollback":   (*adapter).opTransaction,
	"return":     (*adapter).opReturn,
	"cancel":     (*adapter).opCancel,
	"drop":       (*adapter).opDrop,
	"abandon":    (*adapter).opAbandon,
	"guard":      (*adapter).opGuard,
	"library":    (*adapter).opLibrary,
	"ping":       (*adapter).opPing,
	"close_pool": (*adapter).opClosePool,
}

func (a *adapter) handle(c *call, r *request, h handler, e *connEntry) {
	var ok map[string]any
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = &failure{kind: "client", message: fmt.Sprintf("panic: %v", p)}
				logf("request %d (%s) panicked: %v", c.id, r.Op, p)
			}
		}()
		if h == nil {
			err = protocolErr("unknown request '%s'", r.Op)
			return
		}
		ok, err = h(a, c, r)
	}()
	answer := map[string]any{"id": c.id}
	var f *failure
	switch {
	case err == nil:
		answer["ok"] = ok
	case errors.Is(err, errDropped):
		answer["dropped"] = true
	case errors.As(err, &f):
		e := map[string]any{"kind": f.kind, "message": f.message}
		if f.sqlstate != "" {
			e["sqlstate"] = f.sqlstate
		}
		answer["error"] = e
		if f.elapsedMs != nil {
			answer["elapsed_ms"] = *f.elapsedMs
		}
	default:
		answer["error"] = map[string]any{"kind": "client", "message": err.Error()}
	}
	a.mu.Lock()
	if a.inflight[c.id] == c {
		delete(a.inflight, c.id)
	}
	if e != nil && e.busy == c {
		e.busy = nil
	}
	a.mu.Unlock()
	a.send(answer)
	c.cancel()
	close(c.done)
}

// dispatch reads one line and starts its request.
func (a *adapter) dispatch(line []byte) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil || obj == nil {
		logf("a request that is not a JSON object: %.200q", line)
		a.send(map[string]any{"id": nil, "error": map[string]any{"kind": "protocol", "message": "not a JSON object"}})
		return
	}
	var r request
	if err := json.Unmarshal(line, &r); err != nil || r.ID == nil {
		var id any
		var n uint64
		if raw, ok := obj["id"]; ok && json.Unmarshal(raw, &n) == nil {
			id = n
		}
		msg := "a request without an id"
		if err != nil {
			msg = "a malformed request: " + err.Error()
		}
		a.send(map[string]any{"id": id, "error": map[string]any{"kind": "protocol", "message": msg}})
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &call{id: *r.ID, op: r.Op, pool: r.Pool, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	var e *connEntry
	a.mu.Lock()
	a.inflight[c.id] = c
	switch r.Op {
	case "query", "begin", "commit", "rollback":
		if e = a.conns[r.Conn]; e != nil {
			e.busy = c
		}
	}
	a.mu.Unlock()
	go a.handle(c, &r, handlers[r.Op], e)
}

// watchParent exits when the harness is gone (its pid is no longer our
// parent), in case stdin outlives it.
func watchParent() {
	parent := os.Getppid()
	for {
		time.Sleep(500 * time.Millisecond)
		if os.Getppid() != parent {
			logf("the harness is gone; exiting")
			os.Exit(0)
		}
	}
}

// The configuration asked for on the command line: "defaults" or
// "after-release-unlock-all".
var configuration = "defaults"

func main() {
	if len(os.Args) > 2 || (len(os.Args) == 2 && os.Args[1] != "defaults" && os.Args[1] != "after-release-unlock-all") {
		fmt.Fprintln(os.Stderr, "usage: pgxpool-adapter [defaults | after-release-unlock-all] (speaks locklab's driver protocol on stdin/stdout)")
		os.Exit(2)
	}
	if len(os.Args) == 2 {
		configuration = os.Args[1]
	}
	a := newAdapter()
	go watchParent()
	in := bufio.NewReaderSize(os.Stdin, 1<<16)
	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			a.dispatch(line)
		}
		if err != nil {
			break
		}
	}
	// stdin closed: give up what is in flight and close the pools.
	a.mu.Lock()
	ids := make([]string, 0, len(a.pools))
	for id := range a.pools {
		ids = append(ids, id)
	}
	a.mu.Unlock()
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(1)
			go func(id string) { defer wg.Done(); a.closePool(id) }(id)
		}
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		logf("pools not closed within 5 s; exiting anyway")
	}
}
