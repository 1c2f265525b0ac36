# frozen_string_literal: true
#
# The driver protocol's `library` request for `rails-migrator` (adapter.rb):
# `runners` Rails migrators (migrate.rb), each a process of its own, run the
# same migration; each starts once the one before it has reached the lock
# (its migration statement runs, seen in pg_stat_activity by its
# application_name), has finished, or 2 s have passed after it was ready
# (Ruby and ActiveRecord loaded, connected), as locklab's
# `sqlx-migrator` runs do (drivers/src/libraries/on_sqlx08.rs). With
# `kill_first`, the first is killed (SIGKILL) mid-migration before the others
# start. Each is killed `give_up_ms` after it was ready ("gave up"). Answers
# `{"text": "1: ok, 2: failed (…); the migration ran 1×; advisory locks left: 0"}`.

require 'json'
require 'pg'
require 'rbconfig'

module MigrateHost
  HERE = File.expand_path(__dir__)

  module_function

  def now_ms
    Process.clock_gettime(Process::CLOCK_MONOTONIC) * 1000.0
  end

  def side(spec)
    params = {
      host: spec['host'], port: spec['port'], user: spec['user'], dbname: spec['dbname'],
      application_name: "#{spec['application_name']}-observer"[0, 63]
    }
    params[:password] = spec['password'] unless spec['password'].nil?
    PG.connect(params)
  end

  def migrating?(side, name)
    side.exec_params(
      "select count(*) from pg_stat_activity where application_name = $1 and datname = current_database() " \
      "and state = 'active' and query like 'select pg_sleep(%) /* locklab-migration */%'", [name]
    ).getvalue(0, 0).to_i.positive?
  end

  # How long a migrator may take to load Ruby and ActiveRecord and connect.
  READY_BOUND_MS = 60_000

  # A migrator process: [pid, its stdin, its stdout].
  def spawn(spec, n, ms)
    out, w = IO.pipe
    r, go = IO.pipe
    pid = Process.spawn(RbConfig.ruby, File.join(HERE, 'migrate.rb'), JSON.generate(spec), "locklab-migrator-#{n}",
                        ms.to_s, out: w, in: r)
    w.close
    r.close
    [pid, go, out]
  end

  # Its first line, once it said `ready` (or ended, or READY_BOUND_MS passed).
  def ready(out)
    IO.select([out], nil, nil, READY_BOUND_MS / 1000.0) ? out.gets.to_s.strip : ''
  end

  # Its word once it ended, or `gave up after N ms` (killed) at `give_up`.
  def finish(pid, out, first, started, give_up_ms, reaped)
    loop do
      done = reaped || Process.waitpid(pid, Process::WNOHANG)
      if done
        word = ([first] + out.read.to_s.lines).map(&:strip).reject { |l| l.empty? || l == 'ready' }.last.to_s
        out.close
        return word.empty? ? 'failed (no answer)' : word
      end
      if now_ms - started >= give_up_ms
        Process.kill(:KILL, pid)
        Process.waitpid(pid)
        out.close
        return "gave up after #{give_up_ms} ms"
      end
      sleep 0.005
    end
  end

  def call(req, spec)
    unless req['name'] == 'rails-migrator'
      raise Failure.new('unsupported', "no library call '#{req['name']}' here (rails-migrator)")
    end

    a = req['args'] || {}
    runners = Integer(a['runners'])
    ms = Integer(a['migration_ms'])
    give_up_ms = Integer(a['give_up_ms'])
    kill_first = a['kill_first'] == true
    db = side(spec)
    begin
      words = []
      running = []
      # All load Ruby and ActiveRecord and connect first (seconds each), then
      # start in turn, so that they overlap as replicas started together do.
      procs = (1..runners).map { |n| spawn(spec, n, ms) }
      firsts = procs.map { |_, _, out| ready(out) }
      (1..runners).each do |n|
        pid, go, out = procs[n - 1]
        first = firsts[n - 1]
        begin
          go.puts('go')
          go.close
        rescue Errno::EPIPE
          nil
        end
        started = now_ms
        killing = n == 1 && kill_first
        bound = killing ? [give_up_ms, 10_000].max : 2000
        seen = false
        reaped = false
        if n < runners || killing
          while now_ms - started < bound
            if Process.waitpid(pid, Process::WNOHANG)
              reaped = true
              break
            end
            if migrating?(db, "locklab-migrator-#{n}")
              seen = true
              break
            end
            sleep 0.005
          end
        end
        if killing
          unless reaped
            Process.kill(:KILL, pid)
            Process.waitpid(pid)
          end
          out.close
          words << "1: #{seen ? 'killed mid-migration' : 'killed before its migration ran'}"
        else
          running << [n, pid, out, first, started, reaped]
        end
      end
      running.each do |n, pid, out, first, started, reaped|
        words << "#{n}: #{finish(pid, out, first, started, give_up_ms, reaped)}"
      end
      applied = begin
        db.exec('select count(*) from locklab_migration_runs').getvalue(0, 0).to_i
      rescue PG::UndefinedTable
        0
      end
      left = db.exec(
        "select count(*) from pg_locks where locktype = 'advisory' and granted " \
        'and database = (select oid from pg_database where datname = current_database())'
      ).getvalue(0, 0).to_i
      { text: "#{words.join(', ')}; the migration ran #{applied}×; advisory locks left: #{left}" }
    ensure
      db.close
    end
  end
end
