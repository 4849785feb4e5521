//! The slab's lock-free transitions, the ones other threads race with: the
//! remote free list (the owner's take, a freer's push of one block or a
//! run), OWNED -> FULL by the owner, and FULL -> OWNED by a freer's claim,
//! then handed on (`give_back`) or adopted. Methods of `Slab`, as every
//! transition is (`slab`'s docs); a file of their own for the length.

use core::ptr;

use crate::freelist::set_next;
use crate::slab::{
    double_free, invalid_free, owned_word, remote_count, remote_list, Push, Slab, State, Suspicion,
    CLOSED, FULL_WORD, OWNED_TAG, TAG_MASK,
};
use crate::sync::{invariant, AtomicPtr, Ordering};

impl Slab {
    /// OWNED, by its owner: takes the remote free list and its length
    /// (null and 0 if empty). A plain load first: the swap is a locked
    /// instruction on the line the freers write, not worth paying when
    /// nothing came.
    #[inline]
    pub fn take_remote(&self) -> (*mut u8, u32) {
        invariant!(self.state() == State::Owned);
        if self.word.0.load(Ordering::Relaxed) == OWNED_TAG {
            return (ptr::null_mut(), 0);
        }
        // Acquire: pairs with the Release CAS of each remote free, so the
        // links written by the freers are visible.
        let word = self.word.0.swap(OWNED_TAG, Ordering::Acquire);
        (remote_list(word), remote_count(word))
    }

    /// OWNED, for its owner: the blocks on the remote list now, which
    /// `inuse` still counts. Relaxed: a count, no link is followed; more
    /// may come at any time, none leave but by the owner.
    #[inline]
    pub fn remote_pending(&self) -> u32 {
        remote_count(self.word.0.load(Ordering::Relaxed))
    }

    /// OWNED -> FULL, by its owner `owner`, when the slab has no free object
    /// left (all carved, local list and the heap's detached list empty):
    /// SLUB's deactivation of a full slab. Lock-free; false, with nothing
    /// changed, if a remote free came in meanwhile.
    pub fn try_make_full(&self, owner: usize) -> bool {
        invariant!(self.state() == State::Owned);
        invariant!(self.local_free.get().is_null() && self.uncarved() == 0);
        invariant!(!self.on_partial.get());
        self.inuse.set(self.objects.get());
        self.last_owner.set(owner);
        self.owner.store(0, Ordering::Relaxed);
        // Release: publishes the fields above to the freer whose Acquire CAS
        // in `try_claim_full` claims the slab.
        if self
            .word
            .0
            .compare_exchange(OWNED_TAG, FULL_WORD, Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            return true;
        }
        self.owner.store(owner, Ordering::Relaxed);
        false
    }

    /// Frees `p` into a slab the caller does not hold, if it is OWNED by
    /// another heap: the one remote push of the allocator. `me` is the
    /// freer's heap id; `suspicion` says whether `p`'s first word, read
    /// before any write, decodes to a valid link (the double-free test: the
    /// owner holds the lists, so they cannot be walked). Stops the process
    /// on an invalid pointer or a double free. Cost when it pushes: a load,
    /// an owner compare, the slot test, an encode and one CAS. When it does
    /// not push, it may have written its link into `p` already: a caller
    /// that tries again keeps the `suspicion` it read first.
    #[inline]
    pub fn push_remote(&self, p: *mut u8, me: usize, suspicion: Suspicion) -> Push {
        self.push_remote_run(p, p, 1, me, || {
            if !self.is_object_start(p) {
                invalid_free(p);
            }
            if suspicion == Suspicion::DoubleFree {
                double_free(p);
            }
        })
    }

    /// `push_remote` for a run of `n` blocks linked already, `head` to `tail`
    /// (a sheaf's flush: blocks of one slab one after another), with one
    /// CAS that adds `n` to the list's length; `check` runs once the slab is known to be another heap's
    /// OWNED one, before the first link is written (the caller's checks of
    /// the blocks). The run's blocks are live objects of this slab that
    /// the caller gives up.
    #[inline(always)]
    pub fn push_remote_run(
        &self,
        head: *mut u8,
        tail: *mut u8,
        n: u32,
        me: usize,
        check: impl FnOnce(),
    ) -> Push {
        // Acquire (here and on a failed CAS below): pairs with the Release
        // that made the slab FULL (`try_make_full`, `make_full_from_listed`).
        // The callers do not rely on it: the claim that follows acquires
        // for itself (`try_claim_full`), and the push reads nothing that
        // another thread publishes (`div` and `carved` were written before
        // the blocks were allocated; the links of earlier freers reach the
        // owner through its Acquire swap, the freers' CASes being one
        // release sequence). The model passes with both Relaxed.
        let mut r = self.word.0.load(Ordering::Acquire);
        let mut check = Some(check);
        while r & TAG_MASK == OWNED_TAG {
            // Acquire: pairs with `give_back`'s Release of the owner.
            if self.owner.load(Ordering::Acquire) == me {
                return Push::Mine;
            }
            if let Some(check) = check.take() {
                check();
            }
            // SAFETY: `tail` is a live object the caller gives up.
            unsafe { set_next(tail, remote_list(r)) };
            // Release: publishes the links; pairs with the owner's Acquire
            // swap in `take_remote` or `begin_listing`.
            match self.word.0.compare_exchange(
                r,
                owned_word(head, remote_count(r) + n),
                Ordering::Release,
                Ordering::Acquire,
            ) {
                Ok(_) => return Push::Pushed,
                Err(now) => r = now,
            }
        }
        Push::NotOwned(State::of(r))
    }

    /// FULL -> OWNED, claimed by a freer of `p`: one CAS, no lock (SLUB's
    /// `put_cpu_partial` path). The claimant is then alone with the fields
    /// until `give_back` or `adopt`; `p` becomes the only free object.
    /// False if the slab was not FULL any more.
    pub fn try_claim_full(&self, p: *mut u8) -> bool {
        // Acquire: sees the fields the last owner published with the
        // Release CAS in `try_make_full` (or `make_full_from_listed`). Not
        // left to `push_remote`'s Acquire: the FULL it read may be an older
        // one (the slab claimed, handed on and made FULL again since).
        if self
            .word
            .0
            .compare_exchange(FULL_WORD, OWNED_TAG, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        invariant!(self.owner.load(Ordering::Relaxed) == 0);
        invariant!(self.local_free.get().is_null());
        invariant!(self.inuse.get() == self.objects.get());
        // SAFETY: `p` is a live object the caller gives up.
        unsafe { set_next(p, ptr::null_mut()) };
        self.local_free.set(p);
        self.inuse.set(self.objects.get() - 1);
        self.check();
        true
    }

    /// A claimed slab -> OWNED by heap `to`, pushed on `to`'s `returned`
    /// stack for its next refill. False, with the slab still the caller's,
    /// if `to` has exited (its stack is `CLOSED`).
    pub fn give_back(&self, to: usize, returned: &AtomicPtr<Slab>) -> bool {
        invariant!(self.state() == State::Owned);
        invariant!(self.owner.load(Ordering::Relaxed) == 0);
        self.check();
        // Release: the owner's fast path may free into the slab as soon as
        // it sees itself here (Acquire); it must see `local_free` and
        // `inuse` as we left them.
        self.owner.store(to, Ordering::Release);
        let mut head = returned.load(Ordering::Relaxed);
        loop {
            if head == CLOSED {
                self.owner.store(0, Ordering::Relaxed);
                return false;
            }
            self.next.set(head);
            // Release: publishes the slab's fields and link; pairs with the
            // Acquire swap of the stack by its owner.
            match returned.compare_exchange_weak(
                head,
                self as *const Slab as *mut Slab,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(h) => head = h,
            }
        }
    }

    /// A claimed slab -> OWNED by the claimant's heap `me`.
    pub fn adopt(&self, me: usize) {
        invariant!(self.state() == State::Owned);
        invariant!(self.owner.load(Ordering::Relaxed) == 0);
        self.check();
        self.owner.store(me, Ordering::Relaxed);
    }
}
