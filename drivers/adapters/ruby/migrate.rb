# frozen_string_literal: true
#
# One Rails migrator, a process of its own (started by migrate_host.rb): it
# connects ActiveRecord::Base as the pool's spec says, with application_name
# ARGV[1], and runs one migration through ActiveRecord::Migrator, as
# `rails db:migrate` does: `Migrator#migrate` takes the migrator's advisory
# lock (activerecord 6.1 lib/active_record/migration.rb, with_advisory_lock:
# `pg_try_advisory_lock(MIGRATOR_SALT * crc32(database))` on a connection of
# a pool of its own, ConcurrentMigrationError when it is taken, and
# `pg_advisory_unlock`, "Failed to release advisory lock" when that returns
# false). The migration sleeps ARGV[2] ms, then makes a table and counts
# itself in it. Prints `ready` once connected (Ruby and ActiveRecord loaded:
# seconds, which the give-up bound does not count), waits for a line on
# stdin (`go`), then prints one line: `ok`, or the error's class and first
# line.
#
# usage: ruby migrate.rb SPEC_JSON APPLICATION_NAME MIGRATION_MS

require 'json'
require 'active_record'
require_relative 'config'

spec = JSON.parse(ARGV[0])
name = ARGV[1]
ms = Integer(ARGV[2])

config = LocklabConfig.db_config(spec, application_name: name)

# The migration every migrator runs.
class LocklabMigration < ActiveRecord::Migration[6.1]
  class << self
    attr_accessor :ms
  end

  def up
    execute "select pg_sleep(#{self.class.ms / 1000.0}) /* locklab-migration */"
    execute 'create table if not exists locklab_migration_runs (n int)'
    execute 'insert into locklab_migration_runs values (1)'
  end
end
LocklabMigration.ms = ms

begin
  ActiveRecord::Base.logger = nil
  ActiveRecord::Migration.verbose = false
  ActiveRecord::Base.establish_connection(config)
  ActiveRecord::Base.connection.current_database
  puts 'ready'
  $stdout.flush
  exit 0 if $stdin.gets.nil?

  migration = LocklabMigration.new('locklab_migration', 1)
  ActiveRecord::Migrator.new(:up, [migration], ActiveRecord::Base.connection.schema_migration).migrate
  puts 'ok'
rescue StandardError => e
  line = e.message.lines.map(&:strip).find { |l| !l.empty? }.to_s
  puts "failed (#{e.class.name.split('::').last}: #{line[0, 100]})"
end
$stdout.flush
