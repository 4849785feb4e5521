//! A fresh slab hands out its objects in address order (locality), or in a
//! random order with `SLUBMALLOC_FREELIST_RANDOM=1` (SLAB_FREELIST_RANDOM).

use crate::common;

fn steps_to_the_next_slot(env: &[(&str, &str)]) -> u32 {
    let exe = common::compile_c("freelist_order", &[]);
    let out = common::run_preloaded(&exe, &[], env);
    assert!(out.status.success(), "{}", common::stderr(&out));
    common::stdout(&out).trim().parse().unwrap()
}

#[test]
fn fresh_slabs_hand_out_objects_in_address_order_by_default() {
    assert!(steps_to_the_next_slot(&[]) >= 20);
}

#[test]
fn freelist_random_hands_out_objects_in_a_random_order() {
    let steps = steps_to_the_next_slot(&[("SLUBMALLOC_FREELIST_RANDOM", "1")]);
    assert!(
        steps < 12,
        "{steps} of 24 steps went to the next slot: not randomized"
    );
}
