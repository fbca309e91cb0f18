"""The NVIDIA control node as a framework's presence check sees it (client/entry/device_nodes.cc),
run with the client library preloaded: os.path.exists('/dev/nvidiactl') is true where the node is
absent, it stats as the character device 195:255, opening it still fails, other paths are not
touched, and TALLY_DEVICE_NODES=0 turns it off.

    LD_PRELOAD=libtally_client.so python3 device_nodes_test.py
"""
import os
import stat
import subprocess
import sys

NODE = "/dev/nvidiactl"


def main():
    if os.environ.get("TALLY_DEVICE_NODES") == "0":
        assert not os.path.exists(NODE), "TALLY_DEVICE_NODES=0 must leave the check alone"
        print("ok: off when asked")
        return
    if not os.path.exists(NODE):
        sys.exit("FAIL: the client is not preloaded, or it does not answer for " + NODE)
    info = os.stat(NODE)
    assert stat.S_ISCHR(info.st_mode), "not a character device"
    assert (os.major(info.st_rdev), os.minor(info.st_rdev)) == (195, 255), "wrong device numbers"
    assert not os.path.exists("/dev/nvidia0"), "only the control node is answered for"
    assert not os.path.exists("/dev/nvidiactl-not-a-node")
    try:
        open(NODE).close()
    except OSError:
        pass
    else:
        sys.exit("FAIL: opening the answered-for node must still fail")
    off = subprocess.run([sys.executable, __file__], env=dict(os.environ, TALLY_DEVICE_NODES="0"))
    assert off.returncode == 0, "TALLY_DEVICE_NODES=0 run failed"
    print("ok: /dev/nvidiactl answered for as 195:255, nothing else")


def real_node_exists():
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    probe = "import os, sys; sys.exit(0 if os.path.exists(%r) else 1)" % NODE
    return subprocess.run([sys.executable, "-c", probe], env=env).returncode == 0


if __name__ == "__main__":
    if os.environ.get("TALLY_DEVICE_NODES") != "0" and real_node_exists():
        print("SKIP: this host has a real " + NODE)
        sys.exit(77)
    main()
