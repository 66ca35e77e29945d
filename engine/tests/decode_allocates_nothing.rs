//! Decoding a token allocates nothing: the forward pass runs in the buffers its session planned
//! when it started, the sampler reuses its own, and a riding guard's hidden states are copied
//! into buffers kept between steps. Counted by a global allocator wrapper, on
//! a tiny random model (attention on the calling thread) and on the real default model with a
//! context long enough that attention splits over the pool, with each kv cache type, and with a
//! LoRA adapter on (its side path reuses buffers too, on the calling thread or over the pool).
//!
//! This file holds a single test so no other test's threads allocate while it counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use kostant_engine::adapter::synth::{random_adapter, SynthAdapter};
use kostant_engine::gguf::Gguf;
use kostant_engine::sampling::{Sampler, SamplingParams};
use kostant_engine::testing::{real_model_path, tiny_model_bytes, TinySpec};
use kostant_engine::{ActiveAdapter, Batch, KvType, LoraAdapter, Model, Outputs, Session};

/// Counts every allocation and reallocation, then defers to the system allocator.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed unchanged to `System`, which upholds GlobalAlloc's contract;
// the counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through `alloc` or `realloc` above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; `ptr` came from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations made by `steps` sampled decode steps after a prompt of `prompt_len` tokens and
/// two warm-up steps (the first step after a prompt resizes the buffers to one token). With
/// `taps`, each step also hands out the token's hidden states there, as for a riding guard.
fn allocations_while_decoding(
    model: &Arc<Model>,
    kv: KvType,
    prompt_len: usize,
    steps: usize,
    taps: &[usize],
    adapter: Option<&Arc<LoraAdapter>>,
) -> usize {
    let n_vocab = model.hparams.n_vocab as u32;
    let prompt: Vec<u32> = (0..prompt_len as u32)
        .map(|i| (i * 7 + 3) % n_vocab)
        .collect();
    let mut session = Session::with_kv_type(model.clone(), prompt_len + steps + 8, kv).unwrap();
    session
        .set_adapter(adapter.map(|a| ActiveAdapter {
            adapter: a.clone(),
            scale: 1.0,
        }))
        .unwrap();
    let mut sampler = Sampler::new(SamplingParams {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        repeat_penalty: 1.1,
        ..SamplingParams::default()
    })
    .unwrap();
    let mut out = Outputs::new();
    session
        .decode(&Batch::prompt(&prompt).with_taps(taps), &mut out)
        .unwrap();
    let mut history = Vec::with_capacity(prompt_len + steps + 8);
    history.extend_from_slice(&prompt);
    // The whole loop on one pool worker, as a step runs: entering the pool from outside is
    // rayon's own business, not the forward pass's.
    kostant_kernels::in_pool(|| {
        let mut step = |history: &mut Vec<u32>, out: &mut Outputs| {
            let id = sampler.sample(out.last_logits_mut(), history);
            history.push(id);
            session
                .decode(&Batch::step(&id).with_taps(taps), out)
                .unwrap();
            assert_eq!(out.states().len(), taps.len());
            assert_eq!(out.rows(), 1);
        };
        for _ in 0..2 {
            step(&mut history, &mut out);
        }
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for _ in 0..steps {
            step(&mut history, &mut out);
        }
        ALLOCATIONS.load(Ordering::Relaxed) - before
    })
}

#[test]
fn a_decode_step_allocates_nothing() {
    let tiny = Model::from_gguf(
        Gguf::from_bytes(
            tiny_model_bytes(&TinySpec {
                n_embd: 128,
                n_head: 4,
                n_head_kv: 2,
                ..Default::default()
            })
            .unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    let real = Model::load(&real_model_path()).unwrap();
    // 480 positions: attention over them (9 heads x 64 wide) is past the size at which the
    // pass splits a token's heads over the pool.
    for (name, model, prompt_len) in [("tiny", &tiny, 8), ("real", &real, 480)] {
        for kv in [KvType::F16, KvType::Q8_0, KvType::Q4_0] {
            let n = allocations_while_decoding(model, kv, prompt_len, 12, &[], None);
            assert_eq!(
                n, 0,
                "{name} model, {kv:?} cache: {n} allocations in 12 steps"
            );
        }
        // A guard's taps: a middle layer and the final norm's output.
        let taps = [1, model.hparams.n_layer];
        let n = allocations_while_decoding(model, KvType::F16, prompt_len, 12, &taps, None);
        assert_eq!(n, 0, "{name} model with taps: {n} allocations in 12 steps");
        // A rank-16 adapter on every projection, and one of rank 64, whose side paths on the
        // real model are large enough to split over the pool (kernels' lora driver).
        for rank in [16, 64] {
            let file = random_adapter(model, &SynthAdapter::new(rank, 5))
                .unwrap()
                .to_bytes()
                .unwrap();
            let adapter =
                LoraAdapter::from_gguf(Gguf::from_bytes(file).unwrap(), "synth", model).unwrap();
            let n = allocations_while_decoding(
                model,
                KvType::F16,
                prompt_len,
                12,
                &taps,
                Some(&adapter),
            );
            assert_eq!(
                n, 0,
                "{name} model with a rank-{rank} adapter: {n} allocations in 12 steps"
            );
        }
    }
}
