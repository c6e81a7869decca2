//! Symmetry reduction: one representative flow stands for all its images.
//!
//! An algorithm that knows its call is symmetric — nodes, heads or channels that are copies of
//! each other, doing the same thing at the same time — simulates one representative per class
//! of equivalent flows. Every flow of the whole call (an *image*) names its representative; the
//! representative then runs on the real network as a flow that counts, on each link, how many
//! images of it cross that link ([`Network::add_weighted_path`](crate::net::Network)). Max-min
//! shares on that reduced network are exactly those of the whole call, provided the images
//! really are equivalent — which `reduce` checks rather than assumes:
//!
//! Give each link a *type*: its capacity and, for every representative, how many of its images
//! cross the link. If every image crosses the same multiset of link types as its
//! representative, then at any moment (images move in lockstep with their representative) every
//! link of a type carries the same load, so an image meets exactly the constraints its
//! representative meets, and giving it the representative's rate is the max-min allocation:
//! it is feasible, and each image is held by a saturated link of the same type as its
//! representative's bottleneck, on which no flow is faster. When the check fails (racks,
//! oversubscription, a partial node), `reduce` says so and `refine` splits the classes.
//!
//! The check covers the links; the caller checks the rest of what makes images equivalent
//! (their position in the algorithm's dependency structure, delays, efficiencies).

use std::collections::HashMap;

use crate::net::LinkId;

/// What makes links equivalent: capacity (its bits) and, per representative, how many of its
/// images cross the link.
type LinkType<'a> = (u64, &'a [(u32, u32)]);

/// One flow of the whole call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Image<'a> {
    /// The links it crosses.
    pub path: &'a [u32],
    /// Its representative (an index into the representatives).
    pub rep: u32,
}

/// A representative's path on the reduced network: the links where it or its images run, and
/// how many of them cross each.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reduced {
    /// Links.
    pub links: Vec<LinkId>,
    /// Images on each link.
    pub weights: Vec<f64>,
}

/// The reduced paths of the representatives, whose own paths are `own[r]`, from every flow of
/// the whole call (the representatives included, as images of themselves).
///
/// When some image crosses other link types than its representative — the call is not
/// symmetric under the classes the caller proposed — the error gives each image's signature
/// (equal numbers: the same multiset of link types), for the caller to split its classes by
/// and try again. Splitting only ever refines, so trying again ends, at worst with every flow
/// its own representative.
pub(crate) fn reduce(
    caps: &[f64],
    own: &[&[u32]],
    images: &[Image<'_>],
) -> Result<Vec<Reduced>, Vec<u32>> {
    // (link, representative) for every link of every image, counted.
    let mut pairs: Vec<(u32, u32)> =
        images.iter().flat_map(|im| im.path.iter().map(move |&l| (l, im.rep))).collect();
    pairs.sort_unstable();
    // Per link: its (representative, count) entries, a range of `entries`.
    let mut entries: Vec<(u32, u32)> = Vec::with_capacity(pairs.len());
    let mut links: Vec<(u32, u32, u32)> = Vec::new(); // (link, start, end)
    let mut i = 0;
    while i < pairs.len() {
        let (l, r) = pairs[i];
        let mut j = i;
        while j < pairs.len() && pairs[j] == (l, r) {
            j += 1;
        }
        match links.last_mut() {
            Some(last) if last.0 == l => last.2 += 1,
            _ => links.push((l, entries.len() as u32, entries.len() as u32 + 1)),
        }
        entries.push((r, (j - i) as u32));
        i = j;
    }
    // Intern each link's type: capacity and entries.
    let mut types: HashMap<LinkType<'_>, u32> = HashMap::new();
    let mut type_of: Vec<u32> = vec![u32::MAX; caps.len()];
    for &(l, a, b) in &links {
        let key = (caps[l as usize].to_bits(), &entries[a as usize..b as usize]);
        let next = types.len() as u32;
        let t = *types.entry(key).or_insert(next);
        type_of[l as usize] = t;
    }
    let signature = |path: &[u32]| {
        let mut s: Vec<u32> = path.iter().map(|&l| type_of[l as usize]).collect();
        s.sort_unstable();
        s
    };
    let reps: Vec<Vec<u32>> = own.iter().map(|p| signature(p)).collect();
    if images.iter().any(|im| reps.get(im.rep as usize) != Some(&signature(im.path))) {
        let mut ids: HashMap<Vec<u32>, u32> = HashMap::new();
        return Err(images
            .iter()
            .map(|im| {
                let next = ids.len() as u32;
                *ids.entry(signature(im.path)).or_insert(next)
            })
            .collect());
    }
    // A representative's reduced path: the links of representatives on which its images run,
    // one link per type (links of one type carry the same images: the same constraint).
    let mut on_reps: Vec<u32> = own.iter().flat_map(|p| p.iter().copied()).collect();
    on_reps.sort_unstable();
    on_reps.dedup();
    let mut seen = vec![false; types.len()];
    let mut out = vec![Reduced { links: Vec::new(), weights: Vec::new() }; own.len()];
    let mut li = 0;
    for l in on_reps {
        while links[li].0 < l {
            li += 1;
        }
        let t = type_of[l as usize] as usize;
        if std::mem::replace(&mut seen[t], true) {
            continue;
        }
        let (_, a, b) = links[li];
        for &(r, n) in &entries[a as usize..b as usize] {
            out[r as usize].links.push(LinkId(l));
            out[r as usize].weights.push(f64::from(n));
        }
    }
    Ok(out)
}

/// What [`refine`] found: each class's representative unit and their flows' reduced paths (in
/// representative order), and each unit's class.
pub(crate) struct Classes {
    pub reps: Vec<usize>,
    pub paths: Vec<Reduced>,
    pub class: Vec<usize>,
}

impl Classes {
    /// Units in each class.
    pub fn sizes(&self) -> Vec<usize> {
        let mut n = vec![0; self.reps.len()];
        for &k in &self.class {
            n[k] += 1;
        }
        n
    }
}

/// Classes of equivalent units (channels, pipelines) and their representatives' reduced
/// paths, found by refinement.
///
/// A unit's flows are images of its class representative's: `images(u, r)` gives unit `u`'s
/// flows as images of unit `r`'s — each its path and the index of the flow of `r` it stands
/// for — or `None` when `u` cannot stand for `r` at all (its structure or timing differs);
/// `own(r)` gives `r`'s flows' paths, in index order. Starting from one class, a unit that
/// cannot map onto its representative joins the first class it maps onto or starts one, and
/// classes split by their units' flow signatures (`reduce`) until every image matches; when
/// no split helps, every unit stands for itself (the detailed run). `None` when that takes more
/// than `max_flows` representative flows, or cannot hold even then (the units do not cover the
/// asymmetry, as a ring's channels do not cover differences between its nodes).
pub(crate) fn refine<'p>(
    units: usize,
    caps: &[f64],
    max_flows: usize,
    images: impl Fn(usize, usize) -> Option<Vec<(&'p [u32], usize)>>,
    own: impl Fn(usize) -> Vec<&'p [u32]>,
) -> Option<Classes> {
    let mut class = vec![0usize; units];
    let mut reps = vec![0usize];
    loop {
        // Units that do not map onto their representative move to one they map onto.
        for u in 0..units {
            if images(u, reps[class[u]]).is_none() {
                match reps.iter().position(|&r| images(u, r).is_some()) {
                    Some(k) => class[u] = k,
                    None => {
                        class[u] = reps.len();
                        reps.push(u);
                    }
                }
            }
        }
        let owns: Vec<Vec<&'p [u32]>> = reps.iter().map(|&r| own(r)).collect();
        if owns.iter().map(Vec::len).sum::<usize>() > max_flows {
            return None;
        }
        let first: Vec<usize> = owns
            .iter()
            .scan(0, |at, o| {
                let f = *at;
                *at += o.len();
                Some(f)
            })
            .collect();
        let mut all = Vec::new();
        let mut span = Vec::with_capacity(units + 1);
        span.push(0);
        for (u, &k) in class.iter().enumerate() {
            for (path, i) in images(u, reps[k])? {
                all.push(Image { path, rep: (first[k] + i) as u32 });
            }
            span.push(all.len());
        }
        let flat: Vec<&[u32]> = owns.iter().flatten().copied().collect();
        match reduce(caps, &flat, &all) {
            Ok(paths) => return Some(Classes { reps, paths, class }),
            Err(signatures) => {
                // Split each class by its units' signatures, flow by flow.
                let mut keys: Vec<(usize, &[u32])> = Vec::new();
                let mut next_class = Vec::with_capacity(units);
                let mut next_reps = Vec::new();
                for u in 0..units {
                    let key = (class[u], &signatures[span[u]..span[u + 1]]);
                    let k = keys.iter().position(|k| *k == key).unwrap_or_else(|| {
                        keys.push(key);
                        next_reps.push(u);
                        keys.len() - 1
                    });
                    next_class.push(k);
                }
                if next_reps.len() == reps.len() {
                    if reps.len() == units {
                        return None;
                    }
                    // No split helps: every unit its own representative, the detailed run.
                    class = (0..units).collect();
                    reps = (0..units).collect();
                    continue;
                }
                class = next_class;
                reps = next_reps;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_on_separate_links_reduce_to_one_each() {
        // Two nodes, each sending on its own link 0/1 into a shared link 2.
        let caps = [10.0, 10.0, 10.0];
        let (a, b) = ([0u32, 2], [1u32, 2]);
        let images = [Image { path: &a, rep: 0 }, Image { path: &b, rep: 0 }];
        let r = reduce(&caps, &[&a], &images).unwrap();
        assert_eq!(r[0].links, vec![LinkId(0), LinkId(2)]);
        assert_eq!(r[0].weights, vec![1.0, 2.0]);
    }

    #[test]
    fn links_of_one_type_are_one_constraint() {
        // Two representatives whose images swap links: both links carry one image of each,
        // so one of them is constraint enough.
        let caps = [10.0; 2];
        let (r0, r1) = ([0u32], [1u32]);
        let (i0, i1) = ([1u32], [0u32]);
        let images = [
            Image { path: &r0, rep: 0 },
            Image { path: &i0, rep: 0 },
            Image { path: &r1, rep: 1 },
            Image { path: &i1, rep: 1 },
        ];
        let r = reduce(&caps, &[&r0, &r1], &images).unwrap();
        assert_eq!(r[0].links, vec![LinkId(0)]);
        assert_eq!(r[1].links, vec![LinkId(0)]);
    }

    #[test]
    fn unequal_images_are_refused() {
        // The second image crosses a slower link.
        let caps = [10.0, 5.0];
        let (a, b) = ([0u32], [1u32]);
        let images = [Image { path: &a, rep: 0 }, Image { path: &b, rep: 0 }];
        assert_eq!(reduce(&caps, &[&a], &images), Err(vec![0, 1]));
        // Two images on one link against one alone: refused too.
        let caps = [10.0, 10.0];
        let (c, d, e) = ([0u32], [0u32], [1u32]);
        let images =
            [Image { path: &c, rep: 0 }, Image { path: &d, rep: 0 }, Image { path: &e, rep: 0 }];
        assert!(reduce(&caps, &[&c], &images).is_err());
    }
}
