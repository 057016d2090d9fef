//! Shrinks a differing case: fewer ops, earlier ring positions, fewer SGEs,
//! smaller sizes, flags off, fields zero — keeping any difference.

use crate::case::{Case, Op};
use crate::run::{self, Diff, Outcome};

/// The variants of a case a shrinker tries: each a copy of the case with
/// one change applied, kept only where the change changed it.
pub(crate) struct Variants<'a, C> {
    base: &'a C,
    out: Vec<C>,
}

impl<'a, C: Clone + PartialEq> Variants<'a, C> {
    pub(crate) fn new(base: &'a C) -> Self {
        Variants { base, out: Vec::new() }
    }

    /// The case changed by `f`, unless that left it as it was.
    pub(crate) fn push(&mut self, f: impl FnOnce(&mut C)) {
        let mut k = self.base.clone();
        f(&mut k);
        if k != *self.base {
            self.out.push(k);
        }
    }

    pub(crate) fn into_vec(self) -> Vec<C> {
        self.out
    }
}

/// Greedy shrinking: the first of `candidates(case, diff)` that still
/// differs (`differs` gives its difference) becomes the case and the search
/// starts over from it, until no candidate differs or `budget` candidates
/// were run.
pub(crate) fn greedy<C, D>(
    mut case: C,
    mut diff: D,
    mut budget: u32,
    candidates: impl Fn(&C, &D) -> Vec<C>,
    mut differs: impl FnMut(&C) -> Option<D>,
) -> (C, D) {
    'outer: loop {
        for k in candidates(&case, &diff) {
            if budget == 0 {
                break 'outer;
            }
            budget -= 1;
            if let Some(d) = differs(&k) {
                case = k;
                diff = d;
                continue 'outer;
            }
        }
        break;
    }
    (case, diff)
}

fn candidates(c: &Case) -> Vec<Case> {
    let mut v = Variants::new(c);
    for i in 0..c.ops.len() {
        if c.ops.len() > 1 {
            v.push(|k: &mut Case| {
                k.ops.remove(i);
            });
        }
    }
    let ring = c.cfg.sq_quanta;
    v.push(|k| k.sq_filler = 0);
    v.push(|k| k.sq_filler = k.sq_filler.saturating_sub(2 * ring));
    v.push(|k| k.sq_filler = k.sq_filler.saturating_sub(ring));
    v.push(|k| k.sq_filler /= 2);
    v.push(|k| k.sq_filler = k.sq_filler.saturating_sub(8));
    v.push(|k| k.sq_filler = k.sq_filler.saturating_sub(1));
    v.push(|k| k.sq_outstanding = 0);
    v.push(|k| k.sq_outstanding /= 2);
    v.push(|k| k.rq_outstanding = 0);
    v.push(|k| k.rq_outstanding /= 2);
    v.push(|k| k.rq_filler = 0);
    v.push(|k| k.rq_filler /= 2);
    v.push(|k| k.rq_filler = k.rq_filler.saturating_sub(1));
    for i in 0..c.ops.len() {
        match &c.ops[i] {
            Op::Sq(p) => sq_variants(&mut v, i, p.sges.len()),
            Op::Rq { sges, .. } => rq_variants(&mut v, i, sges.len()),
        }
    }
    v.into_vec()
}

/// The variants of SQ post `i` (with `n_sges` SGEs): an SGE fewer or
/// halved, no immediate, flags off, no posting, remote fields zero.
fn sq_variants(v: &mut Variants<'_, Case>, i: usize, n_sges: usize) {
    for j in 0..n_sges {
        v.push(|k| {
            if let Op::Sq(q) = &mut k.ops[i] {
                let off: u32 = q.sges[..j].iter().map(|s| s.length).sum();
                let len = q.sges[j].length;
                q.sges.remove(j);
                if q.inline() {
                    q.data.drain(off as usize..(off + len) as usize);
                }
            }
        });
        v.push(|k| {
            if let Op::Sq(q) = &mut k.ops[i]
                && !q.inline()
            {
                q.sges[j].length /= 2;
                q.sges[j].addr = 0;
                q.sges[j].lkey = 0;
            }
        });
    }
    v.push(|k| {
        if let Op::Sq(q) = &mut k.ops[i] {
            q.imm = None;
        }
    });
    v.push(|k| {
        if let Op::Sq(q) = &mut k.ops[i] {
            q.signaled = false;
            q.read_fence = false;
            q.local_fence = false;
            q.report_rtt = false;
            q.udp_hdr = false;
            q.read_inv = false;
        }
    });
    v.push(|k| {
        if let Op::Sq(q) = &mut k.ops[i] {
            q.post_sq = false;
        }
    });
    v.push(|k| {
        if let Op::Sq(q) = &mut k.ops[i] {
            q.remote_addr = 0;
            q.rkey = 0;
            q.qkey = 0;
            q.dest_qp = 0;
            q.ah_id = 0;
            q.l4len = 0;
            q.stag_to_inv = 0;
            q.target_stag = 0;
        }
    });
}

/// The variants of receive `i`: an SGE fewer.
fn rq_variants(v: &mut Variants<'_, Case>, i: usize, n_sges: usize) {
    for j in 0..n_sges {
        v.push(|k| {
            if let Op::Rq { sges, .. } = &mut k.ops[i] {
                sges.remove(j);
            }
        });
    }
}

/// The smallest still-differing case found (bounded effort).
pub fn shrink(case: Case, diff: Diff) -> (Case, Diff) {
    greedy(
        case,
        diff,
        3000,
        |c, _| candidates(c),
        |k| match run::run(k, &mut None) {
            Outcome::Differs(d) => Some(d),
            _ => None,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::{Variants, greedy};

    /// Drops one element at a time (an unchanged copy is left out).
    fn drops(c: &Vec<u32>) -> Vec<Vec<u32>> {
        let mut v = Variants::new(c);
        for i in 0..c.len() {
            v.push(|k| {
                k.remove(i);
            });
        }
        v.push(|_| ());
        v.into_vec()
    }

    #[test]
    fn greedy_keeps_the_difference_and_stops_at_the_budget() {
        assert_eq!(drops(&vec![1, 2]), vec![vec![2], vec![1]]);
        // "differs" while 7 and 9 are both in: shrinks to exactly them
        let differs = |k: &Vec<u32>| (k.contains(&7) && k.contains(&9)).then_some(k.len());
        let (c, d) = greedy(vec![1, 7, 2, 9, 3], 5, u32::MAX, |c, _| drops(c), differs);
        assert_eq!((c, d), (vec![7, 9], 2));
        // two candidates run: the first (dropping 1) kept, then 7 dropped
        // (no longer differing), and the budget is spent
        let (c, d) = greedy(vec![1, 7, 2, 9, 3], 5, 2, |c, _| drops(c), differs);
        assert_eq!((c, d), (vec![7, 2, 9, 3], 4));
    }
}
