//! Shrinks a differing case: fewer ops, earlier ring positions, fewer SGEs,
//! smaller sizes, flags off, fields zero — keeping any difference.

use crate::case::{Case, Op};
use crate::run::{self, Diff, Outcome};

fn candidates(c: &Case) -> Vec<Case> {
    let mut out = Vec::new();
    let mut push = |f: &dyn Fn(&mut Case)| {
        let mut k = c.clone();
        f(&mut k);
        if k != *c {
            out.push(k);
        }
    };
    for i in 0..c.ops.len() {
        if c.ops.len() > 1 {
            push(&|k: &mut Case| {
                k.ops.remove(i);
            });
        }
    }
    let ring = c.cfg.sq_quanta;
    push(&|k| k.sq_filler = 0);
    push(&|k| k.sq_filler = k.sq_filler.saturating_sub(2 * ring));
    push(&|k| k.sq_filler = k.sq_filler.saturating_sub(ring));
    push(&|k| k.sq_filler /= 2);
    push(&|k| k.sq_filler = k.sq_filler.saturating_sub(8));
    push(&|k| k.sq_filler = k.sq_filler.saturating_sub(1));
    push(&|k| k.sq_outstanding = 0);
    push(&|k| k.sq_outstanding /= 2);
    push(&|k| k.rq_outstanding = 0);
    push(&|k| k.rq_outstanding /= 2);
    push(&|k| k.rq_filler = 0);
    push(&|k| k.rq_filler /= 2);
    push(&|k| k.rq_filler = k.rq_filler.saturating_sub(1));
    for i in 0..c.ops.len() {
        match &c.ops[i] {
            Op::Sq(p) => {
                for j in 0..p.sges.len() {
                    push(&|k| {
                        if let Op::Sq(q) = &mut k.ops[i] {
                            let off: u32 = q.sges[..j].iter().map(|s| s.length).sum();
                            let len = q.sges[j].length;
                            q.sges.remove(j);
                            if q.inline() {
                                q.data.drain(off as usize..(off + len) as usize);
                            }
                        }
                    });
                    push(&|k| {
                        if let Op::Sq(q) = &mut k.ops[i]
                            && !q.inline()
                        {
                            q.sges[j].length /= 2;
                            q.sges[j].addr = 0;
                            q.sges[j].lkey = 0;
                        }
                    });
                }
                push(&|k| {
                    if let Op::Sq(q) = &mut k.ops[i] {
                        q.imm = None;
                    }
                });
                push(&|k| {
                    if let Op::Sq(q) = &mut k.ops[i] {
                        q.signaled = false;
                        q.read_fence = false;
                        q.local_fence = false;
                        q.report_rtt = false;
                        q.udp_hdr = false;
                        q.read_inv = false;
                    }
                });
                push(&|k| {
                    if let Op::Sq(q) = &mut k.ops[i] {
                        q.post_sq = false;
                    }
                });
                push(&|k| {
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
            Op::Rq { sges, .. } => {
                for j in 0..sges.len() {
                    push(&|k| {
                        if let Op::Rq { sges, .. } = &mut k.ops[i] {
                            sges.remove(j);
                        }
                    });
                }
            }
        }
    }
    out
}

/// The smallest still-differing case found (bounded effort).
pub fn shrink(mut case: Case, mut diff: Diff) -> (Case, Diff) {
    let mut budget = 3000;
    'outer: while budget > 0 {
        for k in candidates(&case) {
            budget -= 1;
            if let Outcome::Differs(d) = run::run(&k, &mut None) {
                case = k;
                diff = d;
                continue 'outer;
            }
            if budget == 0 {
                break;
            }
        }
        break;
    }
    (case, diff)
}
