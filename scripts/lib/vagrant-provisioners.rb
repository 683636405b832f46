# Prints the shell provisioners a Vagrantfile gives each VM, without Vagrant: the file is
# loaded with a stand-in for the part of Vagrant's configuration API it uses, and every
# `vm.provision "shell"` is printed as one line, "VM<TAB>command", the command shell-quoted
# (environment assignments first). scripts/fresh-check.sh runs those lines in fresh roots.
#
#   ruby scripts/lib/vagrant-provisioners.rb Vagrantfile
require "shellwords"

# Absorbs every setting that is not provisioning (box, network, provider tweaks).
class Sink
  def method_missing(*_args, **_opts)
    yield Sink.new if block_given?
    self
  end

  def respond_to_missing?(*_args)
    true
  end
end

# `config.vm` and `node.vm`: records provisioners under the VM being defined.
class VmSettings < Sink
  def initialize(out, name)
    super()
    @out = out
    @name = name
  end

  def define(name, **_opts)
    yield Node.new(@out, name)
  end

  def provision(kind, **opts)
    raise "only shell provisioners are understood (got #{kind})" unless kind.to_s == "shell"
    raise "a provisioner outside config.vm.define applies to every VM; define it per VM" if @name.nil?

    env = (opts[:env] || {}).map { |k, v| "#{k}=#{v.to_s.shellescape}" }
    cmd = if opts[:path]
            ["bash", opts[:path], *Array(opts[:args])].shelljoin
          else
            ["bash", "-c", opts.fetch(:inline)].shelljoin
          end
    @out << "#{@name}\t#{(env.empty? ? [] : ['env', *env]).push(cmd).join(' ')}"
  end
end

# One `config.vm.define` block's node.
class Node < Sink
  def initialize(out, name)
    super()
    @vm = VmSettings.new(out, name)
  end

  attr_reader :vm
end

# The entry point a Vagrantfile calls.
module Vagrant
  def self.configure(_version)
    config = Node.new(OUT, nil)
    yield config
  end
end

OUT = [] # rubocop:disable Style/MutableConstant
path = ARGV.fetch(0) { abort "usage: ruby #{$PROGRAM_NAME} Vagrantfile" }
load File.expand_path(path)
abort "#{path}: no shell provisioners found" if OUT.empty?
puts OUT
