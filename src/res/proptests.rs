//! Property tests: random operation sequences against reference models.

extern crate std;

use std::collections::BTreeSet;
use std::vec::Vec;

use proptest::prelude::*;

use super::bitmap::{IdBitmap, IdError};
use super::pble::{
    PBLE_GRANULE, PBLES_PER_PAGE, PbleAlloc, PbleError, PbleLayout, PblePolicy, PblePool, PbleRun,
};

#[derive(Clone, Debug)]
enum IdOp {
    Lowest,
    Next,
    From(u32),
    FreeLive(usize),
    FreeAny(u32),
}

fn id_op() -> impl Strategy<Value = IdOp> {
    prop_oneof![
        3 => Just(IdOp::Lowest),
        3 => Just(IdOp::Next),
        2 => any::<u32>().prop_map(IdOp::From),
        4 => any::<usize>().prop_map(IdOp::FreeLive),
        1 => any::<u32>().prop_map(IdOp::FreeAny),
    ]
}

/// First free id of the model at or after `start`, wrapping once.
fn model_from(live: &BTreeSet<u32>, cap: u32, reserved: u32, start: u32) -> Option<u32> {
    (start..cap).chain(reserved..start).find(|i| *i >= reserved && !live.contains(i))
}

proptest! {
    // Shrinking is capped (issue #19): a failure is reported within about
    // 30 s instead of shrinking for minutes.
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, max_shrink_iters: 2048, max_shrink_time: 30_000, ..ProptestConfig::default() })]

    #[test]
    fn bitmap_matches_model(cap in 0u32..200, reserved in 0u32..6, ops in proptest::collection::vec(id_op(), 0..300)) {
        let reserved = reserved.min(cap);
        let mut b = IdBitmap::<4>::new(cap, reserved).unwrap();
        let mut live = BTreeSet::new();
        let mut cursor = reserved;
        for op in ops {
            match op {
                IdOp::Lowest => {
                    let want = (reserved..cap).find(|i| !live.contains(i));
                    let got = b.alloc_lowest();
                    prop_assert_eq!(got.ok(), want);
                    if let Some(id) = want { live.insert(id); }
                    else { prop_assert_eq!(got, Err(IdError::Exhausted)); }
                }
                IdOp::Next | IdOp::From(_) => {
                    let start = match op { IdOp::From(s) => if cap == 0 { 0 } else { s % cap }, _ => cursor };
                    let want = if cap == 0 { None } else { model_from(&live, cap, reserved, start) };
                    let got = match op { IdOp::From(s) => b.alloc_from(s), _ => b.alloc_next() };
                    prop_assert_eq!(got.ok(), want);
                    if let Some(id) = want {
                        live.insert(id);
                        cursor = if id + 1 >= cap { reserved } else { id + 1 };
                    }
                }
                IdOp::FreeLive(k) => {
                    if live.is_empty() { continue; }
                    let id = *live.iter().nth(k % live.len()).unwrap();
                    prop_assert_eq!(b.free(id), Ok(()));
                    live.remove(&id);
                    // A second free of the same id is a typed error.
                    prop_assert_eq!(b.free(id), Err(IdError::NotAllocated));
                }
                IdOp::FreeAny(id) => {
                    let id = id % (cap + 8);
                    let want = if id >= cap { Err(IdError::OutOfRange) }
                        else if id < reserved { Err(IdError::Reserved) }
                        else if live.contains(&id) { Ok(()) }
                        else { Err(IdError::NotAllocated) };
                    prop_assert_eq!(b.free(id), want);
                    live.remove(&id);
                }
            }
            prop_assert_eq!(b.in_use() as usize, live.len());
            prop_assert_eq!(b.available(), cap - reserved - live.len() as u32);
            for id in 0..cap {
                prop_assert_eq!(b.is_in_use(id), id < reserved || live.contains(&id));
            }
        }
    }
}

#[derive(Clone, Debug)]
enum POp {
    Alloc(u32, bool),
    Free(usize),
    DoubleFree,
}

fn p_op() -> impl Strategy<Value = POp> {
    prop_oneof![
        4 => (1u32..1200, any::<bool>()).prop_map(|(n, l2)| POp::Alloc(n, l2)),
        1 => (1u32..5000, any::<bool>()).prop_map(|(n, l2)| POp::Alloc(n, l2)),
        1 => (200_000u32..600_000, Just(true)).prop_map(|(n, l2)| POp::Alloc(n, l2)),
        4 => any::<usize>().prop_map(POp::Free),
        1 => Just(POp::DoubleFree),
    ]
}

const RUNS: usize = 48;

struct Live {
    alloc: PbleAlloc,
    leaves: Vec<PbleRun>,
}

fn extents(l: &Live) -> Vec<PbleRun> {
    match l.alloc {
        PbleAlloc::Level1(r) => std::vec![r],
        PbleAlloc::Level2 { root, .. } => {
            let mut v = std::vec![root];
            v.extend_from_slice(&l.leaves);
            v
        }
    }
}

fn check_pool(p: &PblePool<RUNS>, live: &[Live]) -> Result<(), TestCaseError> {
    let layout = *p.layout();
    let mut all: Vec<(u32, u32)> = Vec::new();
    for l in live {
        for r in extents(l) {
            let end = r.first + r.reserved();
            prop_assert!(
                r.first >= layout.first_index() && end <= layout.end_index(),
                "{:?} outside",
                r
            );
            prop_assert_eq!((r.first - layout.first_index()) % PBLE_GRANULE, 0);
            // Never across an SD boundary.
            let a = layout.locate(r.first).unwrap();
            let b = layout.locate(end - 1).unwrap();
            prop_assert_eq!(a.sd_index, b.sd_index, "{:?} crosses an SD", r);
            prop_assert_eq!(layout.chunk_of(r.first), layout.chunk_of(end - 1));
            all.push((r.first, end));
        }
    }
    for r in p.free_runs() {
        all.push((r.first, r.first + r.count));
    }
    all.sort();
    for w in all.windows(2) {
        prop_assert!(w[0].1 <= w[1].0, "overlap {:?} {:?}", w[0], w[1]);
    }
    // Free space is conserved.
    let used: u64 = live.iter().flat_map(extents).map(|r| r.reserved() as u64).sum();
    prop_assert_eq!(used + p.free_entries() as u64, layout.count() as u64);
    let free_sum: u64 = p.free_runs().iter().map(|r| r.count as u64).sum();
    prop_assert_eq!(free_sum, p.free_entries() as u64);
    // Free runs are sorted and coalesced.
    for w in p.free_runs().windows(2) {
        prop_assert!(w[0].first + w[0].count < w[1].first);
    }
    prop_assert_eq!(p.live_runs(), live.iter().map(|l| extents(l).len()).sum::<usize>());
    Ok(())
}

proptest! {
    // Shrinking is capped (issue #19): a failure is reported within about
    // 30 s instead of shrinking for minutes.
    #![proptest_config(ProptestConfig { cases: 192, failure_persistence: None, max_shrink_iters: 2048, max_shrink_time: 30_000, ..ProptestConfig::default() })]

    #[test]
    fn pble_pool_never_overlaps_and_conserves(
        base_page in 0u64..2048,
        base_off in 0u64..8,
        pages in 0u32..1600,
        ops in proptest::collection::vec(p_op(), 0..120),
    ) {
        let base = base_page * 4096 + base_off * 512;
        let layout = PbleLayout::new(base, pages * PBLES_PER_PAGE + 300).unwrap();
        let mut p = PblePool::<RUNS>::new(layout).unwrap();
        let mut live: Vec<Live> = Vec::new();
        let mut freed: Option<Live> = None;
        for op in ops {
            match op {
                POp::Alloc(n, may_l2) => {
                    let policy = if may_l2 { PblePolicy::Level1OrLevel2 } else { PblePolicy::Level1Only };
                    let could_l1 = p.can_fit_level1(n);
                    prop_assert_eq!(could_l1, n.div_ceil(PBLE_GRANULE) * PBLE_GRANULE <= p.largest_level1());
                    let before = p.free_entries();
                    let mut leaves = std::vec![PbleRun::default(); n.div_ceil(512) as usize];
                    match p.alloc(n, policy, &mut leaves) {
                        Ok(a) => {
                            prop_assert_eq!(a.entries(), n);
                            match a {
                                PbleAlloc::Level1(r) => prop_assert_eq!(r.count, n),
                                PbleAlloc::Level2 { root, leaves: k, .. } => {
                                    // Level 2 only when level 1 was impossible, N > 512, and allowed.
                                    prop_assert!(!could_l1 && n > 512 && may_l2);
                                    prop_assert_eq!(k, n.div_ceil(512));
                                    prop_assert_eq!(root.count, k);
                                    let total: u32 = leaves.iter().map(|l| l.count).sum();
                                    prop_assert_eq!(total, n);
                                    for l in &leaves[..leaves.len() - 1] {
                                        prop_assert_eq!(l.count, 512);
                                    }
                                    // Every page maps to a distinct entry of its leaf.
                                    prop_assert_eq!(a.entry_index(&leaves, n - 1), Some(leaves[leaves.len() - 1].first + (n - 1) % 512));
                                }
                            }
                            if could_l1 {
                                prop_assert!(matches!(a, PbleAlloc::Level1(_)), "level 1 fit but got {:?}", a);
                            }
                            live.push(Live { alloc: a, leaves });
                        }
                        Err(e) => {
                            prop_assert_eq!(p.free_entries(), before, "failed alloc leaked");
                            match e {
                                PbleError::NoSpace => {
                                    prop_assert!(!could_l1);
                                }
                                PbleError::TooLarge => prop_assert!(n > 262_144),
                                PbleError::TooManyRuns => {}
                                other => prop_assert!(false, "unexpected {:?}", other),
                            }
                        }
                    }
                }
                POp::Free(k) => {
                    if live.is_empty() { continue; }
                    let l = live.swap_remove(k % live.len());
                    prop_assert_eq!(p.free(&l.alloc, &l.leaves), Ok(()));
                    freed = Some(l);
                }
                POp::DoubleFree => {
                    if let Some(l) = &freed {
                        // Refused unless an identical run was handed out again
                        // (indistinguishable without generation counters).
                        let before = p.free_entries();
                        let reused = live.iter().flat_map(extents).any(|r| {
                            extents(l).iter().any(|x| x.first == r.first && x.reserved() == r.reserved())
                        });
                        if !reused {
                            prop_assert_eq!(p.free(&l.alloc, &l.leaves), Err(PbleError::NotAllocated));
                            prop_assert_eq!(p.free_entries(), before);
                        }
                    }
                }
            }
            check_pool(&p, &live)?;
        }
        for l in live.drain(..) {
            prop_assert_eq!(p.free(&l.alloc, &l.leaves), Ok(()));
        }
        check_pool(&p, &live)?;
        prop_assert_eq!(p.free_entries(), layout.count());
        if layout.count() > 0 {
            prop_assert_eq!(p.free_runs(), &[PbleRun { first: layout.first_index(), count: layout.count() }]);
        }
    }
}
