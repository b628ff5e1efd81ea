#!/usr/bin/env python3
"""Prints a TCP port on 127.0.0.1 that is free now, for a job's rendezvous
or a VM's wire. Taken below the kernel's ephemeral range when it can be,
where no outgoing connection is given it before its user binds it (as
sode's own launcher does):  port=$(python3 ci/free_port.py)"""
import random
import socket

try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        below = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    below = 32768

ports = random.sample(range(10000, below), 64) if below > 20000 else []
for port in ports + [0]:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    print(s.getsockname()[1])
    s.close()
    break
