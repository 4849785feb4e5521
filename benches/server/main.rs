//! server: the two phases of a tokio server on 2 worker threads, on the C
//! heap (Rust's `System` allocator calls malloc, so LD_PRELOAD chooses the
//! allocator).
//!
//!     server pipeline N    N requests in all
//!     server cache N       N cache operations in all
//!
//! `pipeline`: 64 client tasks each build a request (a JSON object of a
//! user, 1-16 order lines and a note of 0-200 bytes), serialize it and send
//! it with a reply channel to one of 4 handler tasks; the handler parses
//! it, prices the lines and sends back a serialized JSON response, which
//! the client parses and checks. The tasks run where the scheduler puts
//! them, so a body or a response is often freed on the other worker.
//!
//! `cache`: 32 tasks share 16 shards of a `HashMap<u64, Vec<u8>>` of up to
//! 65,536 keys: half the operations insert a value of 16 B-4 KiB (sizes
//! falling off as 1/size), a third copy a value out and drop it, the rest
//! remove one; a task yields every 64 operations.
//!
//! Prints a checksum, so that every allocator is seen doing the same work.
use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

const CLIENTS: u64 = 64;
const HANDLERS: usize = 4;
const CACHE_TASKS: u64 = 32;
const SHARDS: usize = 16;
const KEYS: u64 = 65_536;

/// xorshift64*: the same choices under every allocator.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

type Request = (Vec<u8>, oneshot::Sender<Vec<u8>>);

fn request(rng: &mut Rng, id: u64) -> Vec<u8> {
    let lines: Vec<Value> = (0..1 + rng.below(16))
        .map(|i| {
            json!({
                "sku": format!("SKU-{:06}", rng.below(1_000_000)),
                "qty": 1 + rng.below(9),
                "price": 100 + rng.below(10_000),
                "name": "x".repeat(rng.below(40) as usize + i as usize),
            })
        })
        .collect();
    let note = "n".repeat(rng.below(201) as usize);
    let body = json!({ "id": id, "user": format!("user-{}", rng.below(10_000)), "lines": lines, "note": note });
    serde_json::to_vec(&body).expect("a JSON value serializes")
}

fn respond(body: &[u8]) -> Vec<u8> {
    let req: Value = serde_json::from_slice(body).expect("a request parses");
    let lines = req["lines"].as_array().expect("lines");
    let mut total = 0;
    let priced: Vec<Value> = lines
        .iter()
        .map(|l| {
            let cost = l["qty"].as_u64().unwrap_or(0) * l["price"].as_u64().unwrap_or(0);
            total += cost;
            json!({ "sku": l["sku"], "cost": cost })
        })
        .collect();
    let resp = json!({ "id": req["id"], "user": req["user"], "total": total, "lines": priced });
    serde_json::to_vec(&resp).expect("a JSON value serializes")
}

async fn pipeline(n: u64) -> u64 {
    let mut handlers = Vec::new();
    let mut senders = Vec::new();
    for _ in 0..HANDLERS {
        let (tx, mut rx) = mpsc::channel::<Request>(64);
        senders.push(tx);
        handlers.push(tokio::spawn(async move {
            while let Some((body, reply)) = rx.recv().await {
                let _ = reply.send(respond(&body));
            }
        }));
    }
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let senders = senders.clone();
        let count = n / CLIENTS + u64::from(c < n % CLIENTS);
        clients.push(tokio::spawn(async move {
            let mut rng = Rng::new(c + 1);
            let mut sum = 0u64;
            for i in 0..count {
                let id = c * 1_000_000_000 + i;
                let (tx, rx) = oneshot::channel();
                let to = &senders[rng.below(HANDLERS as u64) as usize];
                to.send((request(&mut rng, id), tx)).await.expect("a handler runs");
                let resp: Value = serde_json::from_slice(&rx.await.expect("a reply")).expect("a response parses");
                assert_eq!(resp["id"].as_u64(), Some(id));
                sum = sum.wrapping_add(resp["total"].as_u64().expect("total"));
            }
            sum
        }));
    }
    drop(senders);
    let mut sum = 0u64;
    for c in clients {
        sum = sum.wrapping_add(c.await.expect("a client ends"));
    }
    for h in handlers {
        h.await.expect("a handler ends");
    }
    sum
}

/// 16 B-4 KiB, falling off as 1/size.
fn value_size(rng: &mut Rng) -> usize {
    let (lo, hi) = (16f64, 4096f64);
    let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    (lo * (hi / lo).powf(u)) as usize
}

async fn cache(n: u64) -> u64 {
    let shards: &'static [Mutex<HashMap<u64, Vec<u8>>>] =
        Box::leak((0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect());
    let mut tasks = Vec::new();
    for t in 0..CACHE_TASKS {
        let count = n / CACHE_TASKS + u64::from(t < n % CACHE_TASKS);
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(1000 + t);
            let mut sum = 0u64;
            for i in 0..count {
                let key = rng.below(KEYS);
                let shard = &shards[key as usize % SHARDS];
                match rng.below(6) {
                    0..=2 => {
                        let v = vec![key as u8; value_size(&mut rng)];
                        shard.lock().unwrap().insert(key, v);
                    }
                    3 | 4 => {
                        let copy = shard.lock().unwrap().get(&key).cloned();
                        sum = sum.wrapping_add(copy.map_or(0, |v| v.len() as u64));
                    }
                    _ => {
                        shard.lock().unwrap().remove(&key);
                    }
                }
                if i % 64 == 63 {
                    tokio::task::yield_now().await;
                }
            }
            sum
        }));
    }
    let mut sum = 0u64;
    for t in tasks {
        sum = sum.wrapping_add(t.await.expect("a cache task ends"));
    }
    sum
}

fn main() {
    let mut args = std::env::args().skip(1);
    let phase = args.next().unwrap_or_default();
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("a runtime");
    let sum = match phase.as_str() {
        "pipeline" => rt.block_on(pipeline(n)),
        "cache" => rt.block_on(cache(n)),
        _ => {
            eprintln!("usage: server pipeline|cache N");
            std::process::exit(2);
        }
    };
    println!("{phase} {n}: checksum {sum}");
}
