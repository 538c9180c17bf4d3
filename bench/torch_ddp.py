#!/usr/bin/env python3
"""PyTorch DistributedDataParallel with the gloo backend on 2 local processes,
the counterpart of bench/bench_procs_train.c: the MNIST MLP of
examples/mnist_mlp (Flatten, Dense 200 relu without bias, Dropout 0.4,
Dense 10 softmax), categorical cross-entropy on probabilities as Keras
computes it, Adam, the same GLOBAL batch split over the processes, the same
threads per process, CPU, rendezvous at tcp://127.0.0.1:PORT.  Rank 0 prints
one JSON object with the median seconds of one optimizer step.
usage: torch_ddp.py GLOBAL_BATCH THREADS_PER_PROCESS [PROCESSES]"""
import json
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, port, batch, threads, out):
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(784, 200, bias=False), torch.nn.ReLU(),
        torch.nn.Dropout(0.4), torch.nn.Linear(200, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    local = batch // world
    x = torch.rand(local, 28, 28, 1)
    y = torch.nn.functional.one_hot(torch.arange(local) % 10, 10).float()

    def step():
        opt.zero_grad(set_to_none=True)
        p = torch.softmax(ddp(x), dim=-1)
        p = torch.clamp(p / p.sum(-1, keepdim=True), 1e-7, 1 - 1e-7)
        loss = -(y * torch.log(p)).sum(-1).mean()
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    times = []
    for _ in range(21):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(3):
            step()
        times.append((time.perf_counter() - t0) / 3)
    if rank == 0:
        times.sort()
        out.put(times[len(times) // 2])
    dist.destroy_process_group()


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    world = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, port, batch, threads, out))
             for r in range(world)]
    for p in procs:
        p.start()
    t = out.get(timeout=600)
    for p in procs:
        p.join()
    print(json.dumps({"bench": "torch_ddp_train_step", "backend": "gloo", "processes": world,
                      "threads_per_process": threads, "global_batch": batch,
                      "torch": torch.__version__, "step_ms": round(t * 1e3, 3)}))


if __name__ == "__main__":
    main()
