"""torch.multiprocessing (spawn): CUDA tensors passed between processes (CUDA IPC:
cudaIpcGetMemHandle/OpenMemHandle, IPC events). The parent sends a tensor; the child checks
its contents and doubles it in place; the parent must see the change (same memory). The
child sends a tensor of its own back and keeps it alive until the parent has copied it.
Through tallyd the child is a second tenant of the same server.
"""
import os
import queue
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_common import Case, error_text, setup_determinism  # noqa: E402

TIMEOUT_S = 120  # a missing message fails the step instead of hanging the suite


def child(to_child, to_parent):
    """Runs in the spawned process; reports ("ok", ...) or ("error", text) for each stage."""
    try:
        import torch
        t = to_child.get(timeout=TIMEOUT_S)
        expected = torch.arange(4096, dtype=torch.float32) * 0.5
        seen = {"device": str(t.device), "sum": float(t.sum()), "equal": bool(torch.equal(t.cpu(), expected))}
        t.mul_(2)  # in place: the parent's tensor, if the memory is really shared
        torch.cuda.synchronize()
        to_parent.put(("ok", seen))
        mine = torch.full((1000,), 3.0, device="cuda") + torch.arange(1000, device="cuda")
        torch.cuda.synchronize()
        to_parent.put(("tensor", mine))
        to_child.get(timeout=TIMEOUT_S)  # "done": only now may `mine` be freed
        to_parent.put(("bye", None))
    except Exception as e:  # noqa: BLE001
        to_parent.put(("error", error_text(e)))


def get(q, what):
    try:
        kind, value = q.get(timeout=TIMEOUT_S)
    except queue.Empty:
        raise TimeoutError(f"no {what} from the child within {TIMEOUT_S} s") from None
    if kind == "error":
        raise RuntimeError(f"child failed: {value}")
    return value


def main():
    case = Case("multiprocessing_ipc")
    torch = setup_determinism()
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    state = {}

    def start():
        state["to_child"], state["to_parent"] = ctx.Queue(), ctx.Queue()
        state["proc"] = ctx.Process(target=child, args=(state["to_child"], state["to_parent"]), daemon=True)
        state["proc"].start()
        return {"started": True}

    def parent_to_child():
        t = torch.arange(4096, dtype=torch.float32, device="cuda") * 0.5
        torch.cuda.synchronize()
        state["to_child"].put(t)
        seen = get(state["to_parent"], "report on the parent's tensor")
        assert seen["equal"], f"child saw different contents: {seen}"
        torch.cuda.synchronize()
        doubled = torch.equal(t.cpu(), torch.arange(4096, dtype=torch.float32))
        assert doubled, "the child's in-place update is not visible to the parent"
        return {"child_saw": seen, "parent_after": t}

    def child_to_parent():
        t = get(state["to_parent"], "tensor")
        copy = t.clone()
        torch.cuda.synchronize()
        del t
        state["to_child"].put("done")
        state["done_sent"] = True
        get(state["to_parent"], "goodbye")
        expected = torch.full((1000,), 3.0) + torch.arange(1000)
        assert torch.equal(copy.cpu(), expected), "the child's tensor arrived with different contents"
        return {"received": copy}

    def join():
        p = state["proc"]
        if not state.get("done_sent"):
            state["to_child"].put("done")  # an earlier step failed: let the child stop waiting
        p.join(timeout=TIMEOUT_S)
        if p.is_alive():
            p.terminate()
            raise TimeoutError("child did not exit")
        assert p.exitcode == 0, f"child exit code {p.exitcode}"
        return {"exitcode": p.exitcode}

    case.step("spawn_child", start)
    case.step("parent_to_child", parent_to_child, needs=["spawn_child"])
    case.step("child_to_parent", child_to_parent, needs=["parent_to_child"])
    case.step("join", join, needs=["spawn_child"])
    if state.get("proc") is not None and state["proc"].is_alive():
        state["proc"].terminate()
    return case.finish()


if __name__ == "__main__":  # spawn re-imports this file in the child
    sys.exit(main())
