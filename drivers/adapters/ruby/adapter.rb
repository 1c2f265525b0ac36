# frozen_string_literal: true
#
# locklab driver adapter for ActiveRecord's connection pool
# (ActiveRecord::ConnectionAdapters::ConnectionPool, the postgresql adapter on
# the pg gem).
#
# Speaks locklab's driver protocol, version 1 (docs/src/protocol.md): one JSON
# object per line on stdin (requests) and stdout (answers), several requests
# in flight at once, each answered by its `id`. Diagnostics go to stderr.
#
# usage: ruby adapter.rb [CONFIG]      (run by .cache/ruby/NAME/ruby, install.sh NAME)
#   CONFIG: defaults (the only one)
#
# "Defaults": a pool per open_pool, made as ActiveRecord makes one
# (ConnectionHandler.new.establish_connection(adapter: "postgresql", …,
# pool: max_size, checkout_timeout: the checkout bound)), ActiveRecord's
# defaults otherwise. From activerecord 6.1 (lib/active_record/
# connection_adapters/abstract/connection_pool.rb): a checkout leases a
# connection to the calling thread and verifies it (`verify!`: `active?`
# sends an empty query); `checkin` runs the checkin callbacks and `expire`,
# and resets nothing: no rollback, no DISCARD, no unlock; the Reaper
# (reaping_frequency 60 s) takes back connections whose owner thread died and
# closes those idle over idle_timeout (300 s). The postgresql adapter
# (postgresql_adapter.rb, configure_connection) sets client_min_messages to
# warning and hands the server's notices to no caller (notices: false in
# adapters.yaml). Autocommit: ActiveRecord sends no BEGIN of its own.
#
# As a Rails application does, each checked-out connection has an owner
# thread (a request's thread) that checks it out, runs its calls and checks
# it in; a request of the protocol hands its call to that thread and waits.
# Statements run on the connection's PG::Connection (`raw_connection`) with
# send_query / get_result, so that every statement's rows come back as text.
#
# Giving up on a call, ActiveRecord's way (nothing of the adapter's own is
# sent to the server):
# - `timeout_ms` and `drop`: the caller stops waiting; the call goes on in its
#   owner thread (a Rails request thread blocked in libpq cannot be left).
#   A checkout granted after it was given up is checked in at once.
# - `abandon`: the owner's `ensure` checks the connection in once its call
#   has ended.
# - `cancel`: PG::Connection#cancel (libpq's PQcancel).
# - `library`: `rails-migrator` runs Rails' migrator in processes of their
#   own (drivers/adapters/ruby/migrate.rb).

require 'json'
require 'pg'
require_relative 'config'

# ActiveRecord takes seconds to load (more on a loaded machine): it loads in
# the background, so that `hello` answers at once (the harness bounds it);
# every other request waits for it.
LOADER = Thread.new do
  require 'active_record'
  ActiveRecord::Base.logger = nil
end

PROTOCOL = 1
CONFIG = ARGV[0] || 'defaults'
unless %w[defaults].include?(CONFIG)
  warn "adapter: unknown configuration '#{CONFIG}' (defaults)"
  exit 2
end
HERE = File.expand_path(__dir__)

$out = Mutex.new
def send_msg(msg)
  line = JSON.generate(msg)
  $out.synchronize do
    $stdout.write(line, "\n")
    $stdout.flush
  end
end

def log(text)
  warn "adapter: #{text}"
end

# What a request failed with, as the protocol names it.
class Failure < StandardError
  attr_reader :kind, :sqlstate
  attr_accessor :elapsed_ms

  def initialize(kind, message, sqlstate = nil)
    super(message)
    @kind = kind
    @sqlstate = sqlstate
  end
end

def failure_of(e)
  return e if e.is_a?(Failure)

  pg = e.is_a?(PG::Error) ? e : (e.respond_to?(:cause) && e.cause.is_a?(PG::Error) ? e.cause : nil)
  if pg
    state = (pg.result&.error_field(PG::PG_DIAG_SQLSTATE) rescue nil)
    primary = (pg.result&.error_field(PG::PG_DIAG_MESSAGE_PRIMARY) rescue nil)
    return Failure.new('db', primary || pg.message.lines.first.to_s.strip, state) if state

    return Failure.new('client', pg.message.lines.first.to_s.strip)
  end
  Failure.new('client', e.message.to_s.lines.first.to_s.strip)
end

def now_ms
  Process.clock_gettime(Process::CLOCK_MONOTONIC) * 1000.0
end

# One request in flight: answered once, by whoever comes first.
class Call
  attr_reader :id, :req

  def initialize(id, req)
    @id = id
    @req = req
    @lock = Mutex.new
    @answered = false
  end

  def answered?
    @lock.synchronize { @answered }
  end

  # Sends `msg` as this request's answer; false if it was already answered.
  def answer(msg)
    first = @lock.synchronize do
      next false if @answered

      @answered = true
    end
    return false unless first

    INFLIGHT.delete(@id)
    send_msg({ id: @id }.merge(msg))
    # (Its own lock: STATE may be held by the caller, close_pool's.)
    ANSWERED_LOCK.synchronize { ANSWERED.broadcast }
    true
  end
end

# A result to wait for, with a bound (Ruby 3.1's Queue#pop has none).
class Box
  def initialize
    @lock = Mutex.new
    @cond = ConditionVariable.new
    @value = nil
  end

  def <<(value)
    @lock.synchronize do
      @value = value
      @cond.broadcast
    end
  end

  # The value, waiting at most `seconds` (nil: as long as it takes); nil if none came.
  def pop(seconds = nil)
    @lock.synchronize do
      if seconds.nil?
        @cond.wait(@lock) while @value.nil?
      else
        deadline = now_ms + seconds * 1000.0
        while @value.nil?
          left = deadline - now_ms
          break if left <= 0

          @cond.wait(@lock, left / 1000.0)
        end
      end
      @value
    end
  end
end

# A checked-out connection and its owner thread, which runs its jobs in turn.
class Owner
  attr_reader :pool_id, :jobs
  attr_accessor :conn, :current

  def initialize(pool_id)
    @pool_id = pool_id
    @jobs = Queue.new
    @conn = nil
    @current = nil
    @thread = Thread.new { run }
  end

  # Runs `block` in the owner thread; returns a Box that gets
  # [:ok, value] or [:error, exception].
  def submit(call = nil, &block)
    done = Box.new
    @jobs << [call, block, done]
    done
  end

  def stop
    @jobs << nil
  end

  private

  def run
    loop do
      job = @jobs.pop
      break if job.nil?

      call, block, done = job
      @current = call
      begin
        done << [:ok, block.call]
      rescue StandardError => e
        done << [:error, e]
      ensure
        @current = nil
      end
    end
  end
end

POOLS = {} # pool id -> { pool:, owners: Set of conn ids }
CONNS = {} # conn id -> Owner
INFLIGHT = {} # request id -> Call
STATE = Mutex.new
# Signalled after each answer, for shutdown's wait for the requests in flight.
ANSWERED_LOCK = Mutex.new
ANSWERED = ConditionVariable.new

def pool_of(id)
  STATE.synchronize { POOLS[id] } or raise Failure.new('protocol', "no pool '#{id}'")
end

def owner_of(id)
  STATE.synchronize { CONNS[id] } or raise Failure.new('protocol', "no checked-out connection '#{id}'")
end

# Waits for `done` (a Box from Owner#submit) at most `ms` (nil: as long as
# it takes); returns [:ok, v], [:error, e] or [:timeout].
def wait_for(done, ms)
  return done.pop if ms.nil?

  done.pop(ms / 1000.0) || [:timeout]
end

def gem_version(name)
  Gem::Specification.find_by_name(name).version.to_s
rescue StandardError
  'unknown'
end

# Without loading ActiveRecord (see LOADER): its version from its gem
# specification.
def op_hello(_req, _call)
  {
    protocol: PROTOCOL,
    library: 'activerecord',
    version: gem_version('activerecord'),
    details: "pg #{PG::VERSION}, libpq #{PG.library_version}, ruby #{RUBY_VERSION}",
    pid: Process.pid,
    cancel: true,
    no_cancel_reason: ''
  }
end

def op_open_pool(req, _call)
  config = LocklabConfig.db_config(req['spec'], pool: req['max_size'], checkout_timeout: req['checkout_timeout_ms'] / 1000.0)
  pool = ActiveRecord::ConnectionAdapters::ConnectionHandler.new.establish_connection(config, owner_name: "pool-#{req['pool']}")
  STATE.synchronize { POOLS[req['pool']] = { pool: pool, conns: [], spec: req['spec'] } }
  {}
end

def op_checkout(req, call)
  p = pool_of(req['pool'])
  owner = Owner.new(req['pool'])
  bound = req['checkout_timeout_ms'] / 1000.0
  done = owner.submit(call) { owner.conn = p[:pool].checkout(bound) }
  r = wait_for(done, req['timeout_ms'])
  if r[0] == :timeout || call.answered?
    # Given up before the pool granted it: the application never got it.
    owner.submit do
      p[:pool].checkin(owner.conn) if owner.conn
    end
    owner.stop
    return r[0] == :timeout ? { gave_up: true } : nil
  end
  if r[0] == :error
    owner.stop
    raise r[1]
  end
  STATE.synchronize do
    CONNS[req['conn']] = owner
    p[:conns] << req['conn']
  end
  { pid: owner.conn.raw_connection.backend_pid }
end

# Every statement's rows, as text, through the connection's PG::Connection.
def run_sql(conn, sql)
  raw = conn.raw_connection
  columns = []
  rows = []
  error = nil
  raw.send_query(sql)
  while (res = raw.get_result)
    begin
      # The server's text: not ActiveRecord's decoders (type_map_for_results).
      res.type_map = PG::TypeMapAllStrings.new
      res.check
      if res.nfields.positive?
        columns = res.fields
        res.each_row { |row| rows << row }
      end
    rescue PG::Error => e
      error ||= failure_of(e)
    ensure
      res.clear
    end
  end
  raise error if error

  { columns: columns, rows: rows }
end

def op_query(req, call, sql = nil)
  owner = owner_of(req['conn'])
  t0 = now_ms
  done = owner.submit(call) { run_sql(owner.conn, sql || req['sql']) }
  r = wait_for(done, req['timeout_ms'])
  elapsed = now_ms - t0
  return { gave_up: true, elapsed_ms: elapsed } if r[0] == :timeout

  if r[0] == :error
    f = failure_of(r[1])
    f.elapsed_ms = elapsed
    raise f
  end
  r[1].merge(notices: [], elapsed_ms: elapsed)
end

def op_transaction(req, call)
  # ActiveRecord's transaction API is a block (`transaction do … end`),
  # which a begin and a commit in separate requests cannot be: the statements.
  op_query(req, call, req['op'])
end

def op_return(req, _call)
  owner = owner_of(req['conn'])
  p = pool_of(owner.pool_id)
  STATE.synchronize do
    CONNS.delete(req['conn'])
    p[:conns].delete(req['conn'])
  end
  conn = owner.conn
  done = owner.submit { p[:pool].checkin(conn) }
  owner.stop
  r = wait_for(done, req['timeout_ms'])
  return { gave_up: true } if r[0] == :timeout
  raise r[1] if r[0] == :error

  # checkin keeps the connection in the pool (it resets nothing); one the
  # pool removed is not among its connections, and one whose socket is
  # gone is finished (asked of libpq: nothing is sent).
  open = p[:pool].connections.include?(conn) && !conn.raw_connection.finished?
  { returned: open ? 'to_pool' : 'closed' }
end

def op_cancel(req, _call)
  owner = owner_of(req['conn'])
  return {} if owner.current.nil? || owner.conn.nil?

  err = owner.conn.raw_connection.cancel
  log("cancel #{req['conn']}: #{err}") if err
  {}
end

def op_drop(req, _call)
  target = STATE.synchronize { INFLIGHT[req['target']] }
  target&.answer({ dropped: true })
  {}
end

def abandon(conn_id)
  owner, p = STATE.synchronize do
    o = CONNS.delete(conn_id)
    pl = o && POOLS[o.pool_id]
    pl[:conns].delete(conn_id) if pl
    [o, pl]
  end
  return unless owner

  owner.current&.answer({ dropped: true })
  # The owner's `ensure`: checked in once its call (if any) has ended.
  owner.submit { p[:pool].checkin(owner.conn) if p && owner.conn }
  owner.stop
end

def op_abandon(req, _call)
  abandon(req['conn'])
  {}
end

def close_pool(id)
  p = STATE.synchronize { POOLS[id] }
  return unless p

  p[:conns].dup.each { |c| abandon(c) }
  STATE.synchronize do
    INFLIGHT.values.each { |c| c.answer({ dropped: true }) if c.req['op'] == 'checkout' && c.req['pool'] == id }
    POOLS.delete(id)
  end
  t = Thread.new { p[:pool].disconnect(false) }
  log("pool #{id}: disconnect did not finish within 5 s") unless t.join(5)
end

def op_close_pool(req, _call)
  close_pool(req['pool'])
  {}
end

def op_guard(_req, _call)
  raise Failure.new('unsupported', 'ActiveRecord has no advisory-lock guard API')
end

def op_library(req, _call)
  require_relative 'migrate_host'
  MigrateHost.call(req, pool_of(req['pool'])[:spec])
end

OPS = {
  'hello' => method(:op_hello),
  'ping' => ->(_r, _c) { {} },
  'open_pool' => method(:op_open_pool),
  'close_pool' => method(:op_close_pool),
  'checkout' => method(:op_checkout),
  'query' => ->(r, c) { op_query(r, c) },
  'begin' => method(:op_transaction),
  'commit' => method(:op_transaction),
  'rollback' => method(:op_transaction),
  'return' => method(:op_return),
  'cancel' => method(:op_cancel),
  'drop' => method(:op_drop),
  'abandon' => method(:op_abandon),
  'guard' => method(:op_guard),
  'library' => method(:op_library)
}.freeze

def handle(req)
  id = req['id']
  call = Call.new(id, req)
  STATE.synchronize { INFLIGHT[id] = call }
  Thread.new do
    fn = OPS[req['op']]
    begin
      raise Failure.new('protocol', "unknown request '#{req['op']}'") unless fn

      LOADER.join unless %w[hello ping].include?(req['op'])

      ok = fn.call(req, call)
      call.answer({ ok: ok }) unless ok.nil?
    rescue StandardError => e
      f = failure_of(e)
      error = { kind: f.kind, message: f.message }
      error[:sqlstate] = f.sqlstate if f.sqlstate
      msg = { error: error }
      msg[:elapsed_ms] = f.elapsed_ms if f.elapsed_ms
      call.answer(msg)
    end
  end
end

def shutdown(why)
  log(why)
  # Requests still in flight answer first (the harness waits for its
  # answers before it closes stdin; a bound for one that does not).
  deadline = now_ms + 2000
  ANSWERED_LOCK.synchronize do
    until INFLIGHT.empty? || now_ms >= deadline
      ANSWERED.wait(ANSWERED_LOCK, (deadline - now_ms) / 1000.0)
    end
  end
  closer = Thread.new { STATE.synchronize { POOLS.keys }.each { |id| close_pool(id) } }
  closer.join(6)
  exit!(0)
end

def main
  $stdout.sync = true
  parent = Process.ppid
  # The harness gone (even by SIGKILL) with our stdin still open somewhere.
  Thread.new do
    loop do
      sleep 0.5
      if Process.ppid != parent
        log('the harness is gone; exiting')
        exit!(0)
      end
    end
  end
  $stdin.each_line do |line|
    next if line.strip.empty?

    begin
      req = JSON.parse(line)
      raise 'not an object' unless req.is_a?(Hash)
    rescue StandardError => e
      log("a request that is not a JSON object (#{e.message}): #{line[0, 200]}")
      send_msg({ id: nil, error: { kind: 'protocol', message: "not a JSON object: #{e.message}" } })
      next
    end
    handle(req)
  end
  shutdown('stdin closed; closing the pools and exiting')
end

main
