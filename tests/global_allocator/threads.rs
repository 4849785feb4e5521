//! Many threads: cross-thread frees with content checks, thread exit with
//! live blocks freed later elsewhere, slabs of exited threads reused.

use std::sync::mpsc;
use std::thread;

fn pattern(id: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (id as usize * 31 + i) as u8).collect()
}

#[test]
fn threads_free_each_others_blocks_with_content_checks() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    const THREADS: usize = 6;
    const PER_THREAD: u64 = 20_000;
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS)
        .map(|_| mpsc::channel::<(u64, Vec<u8>)>())
        .unzip();
    let handles: Vec<_> = receivers
        .into_iter()
        .enumerate()
        .map(|(t, rx)| {
            let senders = senders.clone();
            thread::spawn(move || {
                let mut checked = 0u64;
                for i in 0..PER_THREAD {
                    let id = (t as u64) << 32 | i;
                    let len = (i as usize * 7919) % 3000 + 1;
                    senders[(t + 1 + i as usize) % THREADS]
                        .send((id, pattern(id, len)))
                        .unwrap();
                    while let Ok((id, v)) = rx.try_recv() {
                        assert_eq!(v, pattern(id, v.len()), "block {id:x} corrupted");
                        checked += 1;
                    }
                }
                drop(senders);
                (rx, checked)
            })
        })
        .collect();
    drop(senders);
    let mut total = 0;
    let mut rxs = Vec::new();
    for h in handles {
        let (rx, n) = h.join().unwrap();
        total += n;
        rxs.push(rx);
    }
    for rx in rxs {
        for (id, v) in rx.iter() {
            assert_eq!(v, pattern(id, v.len()));
            total += 1;
        }
    }
    assert_eq!(total, THREADS as u64 * PER_THREAD);
    assert_eq!(
        slubmalloc::check_stats(),
        0,
        "counters disagree with the walk"
    );
}

#[test]
fn blocks_of_an_exited_thread_are_freed_later_by_another() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let blocks: Vec<Box<[u8]>> = thread::spawn(|| {
        (0..5000)
            .map(|i| pattern(i, 100 + i as usize % 900).into_boxed_slice())
            .collect()
    })
    .join()
    .unwrap();
    let before = slubmalloc::stats();
    assert!(before.totals.threads_exited >= 1);
    for (i, b) in blocks.iter().enumerate() {
        assert_eq!(&b[..], &pattern(i as u64, b.len())[..]);
    }
    drop(blocks);
    let after = slubmalloc::stats();
    let in_use = |s: &slubmalloc::Stats| s.caches().map(|c| c.objects_in_use).sum::<u64>();
    assert!(
        in_use(&before) >= in_use(&after) + 5000,
        "frees of a dead thread's blocks were not all counted"
    );
    assert_eq!(slubmalloc::check_stats(), 0);
}

#[test]
fn slabs_of_exited_threads_are_reused_by_live_ones() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let churn = |n: usize| {
        for _ in 0..n {
            thread::spawn(|| {
                let v: Vec<Vec<u8>> = (0..2000).map(|i| vec![i as u8; 48]).collect();
                std::hint::black_box(&v);
            })
            .join()
            .unwrap();
        }
    };
    churn(50);
    let slabs = |s: &slubmalloc::Stats| s.caches().map(|c| c.slabs).sum::<u64>();
    let first = slubmalloc::stats();
    churn(300);
    let second = slubmalloc::stats();
    assert!(
        slabs(&second) <= slabs(&first) + 2,
        "slabs grew from {} to {} across thread churn",
        slabs(&first),
        slabs(&second)
    );
    assert!(second.totals.threads_exited >= first.totals.threads_exited + 300);
    assert_eq!(slubmalloc::check_stats(), 0);
}
