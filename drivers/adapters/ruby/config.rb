# frozen_string_literal: true
#
# ActiveRecord's connection settings from the driver protocol's `spec`, for
# the adapter's pools (adapter.rb) and the migrators (migrate.rb).

module LocklabConfig
  module_function

  # libpq's `options`: `-c name=value` each, spaces and backslashes escaped.
  def startup_options(options)
    options.map { |k, v| "-c #{k}=#{v.to_s.gsub('\\') { '\\\\' }.gsub(' ', '\\ ')}" }.join(' ')
  end

  # The postgresql adapter's configuration for `spec` (host, port, user,
  # password, dbname, application_name, options), with `extra` merged in.
  def db_config(spec, extra = {})
    config = {
      adapter: 'postgresql',
      host: spec['host'],
      port: spec['port'],
      username: spec['user'],
      database: spec['dbname'],
      application_name: spec['application_name']
    }
    config[:password] = spec['password'] unless spec['password'].nil?
    opts = spec['options'] || []
    config[:options] = startup_options(opts) unless opts.empty?
    config.merge(extra)
  end
end
