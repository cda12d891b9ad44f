# shellcheck shell=bash
# ports.sh — sourced by the scripts that start servers (examples/demo/demo.sh,
# .bench/run.sh, .cluster/run.sh): pick a free loopback port, name who holds
# a port, and check that a given process is the one listening on it, so that
# a script never talks to a server that is not its own. Linux only (/proc).

# EPHEMERAL_LOW is the bottom of the kernel's ephemeral port range: free
# ports are picked below it, away from client sockets.
EPHEMERAL_LOW=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)

# free_port prints a loopback TCP port nobody listens on, in
# 10000..EPHEMERAL_LOW.
free_port() {
	local p
	while :; do
		p=$((10000 + RANDOM % (EPHEMERAL_LOW - 10000)))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}

# holds_port PID PORT: whether process PID has a TCP socket listening on
# PORT (the listening socket's inode is among PID's open files). A /readyz
# answer alone could come from another process that took the port first.
holds_port() {
	local pid=$1 hex inode fd
	hex=$(printf ':%04X' "$2")
	while read -r inode; do
		for fd in "/proc/$pid/fd"/*; do
			if [[ $(readlink "$fd" 2>/dev/null) == "socket:[$inode]" ]]; then
				return 0
			fi
		done
	done < <(awk -v h="$hex" '$4 == "0A" && substr($2, length($2) - 4) == h {print $10}' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
	return 1
}

# port_holder PORT: prints who listens on TCP PORT ("pid 123 (redis-server)",
# or "a process not visible from here" when no visible process has the
# socket open) and succeeds; fails, printing nothing, when nobody listens.
port_holder() {
	local hex inode fd pid
	hex=$(printf ':%04X' "$1")
	inode=$(awk -v h="$hex" '$4 == "0A" && substr($2, length($2) - 4) == h {print $10; exit}' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
	[[ -n $inode ]] || return 1
	# One find over every process's open files (a readlink per file took
	# seconds per port on a busy machine).
	fd=$(find /proc/[0-9]*/fd -maxdepth 1 -lname "socket:\[$inode\]" -print -quit 2>/dev/null)
	if [[ -n $fd ]]; then
		pid=${fd#/proc/}
		pid=${pid%%/*}
		echo "pid $pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo '?'))"
		return 0
	fi
	echo "a process not visible from here"
}
