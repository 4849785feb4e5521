//! A sheaf's run of blocks freed into a LISTED slab: spliced whole under
//! one hold of the node lock (`Node::free_unowned_run`), against another
//! freer under the same lock and against a heap that takes the slab.

use super::*;

/// The slab of `s`, OWNER's with all four objects in use, then `c` freed
/// and the slab listed on `node` (as `release::release` gives it up); its
/// objects.
fn listed_with_one_free(s: &Scenario, node: &Node) -> (&'static Slab, Vec<usize>) {
    let (slab, objects) = s.owned_and_all_in_use();
    free_local(slab, objects[2]);
    node.lock.lock();
    list_on_node(node, slab);
    node.lock.unlock();
    (slab, objects)
}

#[test]
fn a_run_into_a_listed_slab_is_freed_whole_beside_a_free_under_the_node_lock() {
    explore(|| {
        let s = Scenario::new();
        let node = Arc::new(Node::new());
        let (slab, objects) = listed_with_one_free(&s, &node);
        let (a, b, c, d) = (objects[0], objects[1], objects[2], objects[3]);
        let n = node.clone();
        // The flush of the run `a`, `b`: no push (the slab is LISTED), the
        // run onto the local list in one hold of the lock.
        let freer = thread::spawn(move || {
            assert_eq!(flush_run(OTHER, &n, slab, &[a, b], None), (false, false));
        });
        // Another heap's free of `d`, under the same lock.
        assert!(!free_by(THIRD, &node, slab, d, Suspicion::Clear, None));
        freer.join().unwrap();
        node.lock.lock();
        assert_eq!(slab.state(), State::Listed);
        assert_eq!(slab.inuse.get(), 0);
        slab.check();
        let mut free = BTreeSet::new();
        collect(slab.local_free.get(), &mut free);
        assert_eq!(free, BTreeSet::from([a, b, c, d]));
        // Kept, as the node's only partial slab; every free counted once.
        assert_eq!(node.nr_partial.load(Ordering::Relaxed), 1);
        assert_eq!(node.free_objects.load(Ordering::Relaxed), 4);
        assert_eq!(node.frees_listed.load(Ordering::Relaxed), 3);
        node.lock.unlock();
    });
}

#[test]
fn a_run_into_a_listed_slab_that_a_heap_takes_lands_on_one_list() {
    explore(|| {
        let s = Scenario::new();
        let node = Arc::new(Node::new());
        let (slab, objects) = listed_with_one_free(&s, &node);
        let (a, b, c) = (objects[0], objects[1], objects[2]);
        let n = node.clone();
        // The flush of the run `a`, `b`: under the lock while the slab is
        // LISTED; else, OWNER having taken it, pushed whole (the take came
        // first) or each block pushed (it came while the freer waited for
        // the lock).
        let freer = thread::spawn(move || {
            let (pushed, claimed) = flush_run(OTHER, &n, slab, &[a, b], None);
            assert!(!claimed);
            pushed
        });
        take_from_node(&node, slab);
        let pushed = freer.join().unwrap();
        assert_eq!(slab.state(), State::Owned);
        assert_eq!(slab.owner.load(Ordering::Relaxed), OWNER);
        assert_eq!(node.nr_partial.load(Ordering::Relaxed), 0);
        assert_eq!(node.free_objects.load(Ordering::Relaxed), 0);
        let listed = node.frees_listed.load(Ordering::Relaxed);
        // The whole run under the lock before the take, or none of it.
        assert!(
            listed == 2 && !pushed || listed == 0,
            "{listed} frees under the lock"
        );
        slab.check();
        assert_eq!(free_in_owned(slab), BTreeSet::from([a, b, c]));
    });
}
