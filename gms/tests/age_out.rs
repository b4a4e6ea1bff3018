// SPDX-License-Identifier: GPL-2.0-only
//! The global LRU's rule for held pages (`GmsNode::age_out`): a dirty page is never let
//! go for room — kept until its writer cleans it — and a clean, registered one is.

use gms::prelude::*;
use netrpc::prelude::*;
use netrpc::storage::Heap;
use proptest::prelude::*;

#[derive(Default)]
struct Frames {
    dropped: Vec<(PageId, u32, bool)>,
}

impl Host<u32> for Frames {
    fn copy_payload(&mut self, _: &u32, _: &u32, _: u32) -> bool {
        true
    }
    fn release(&mut self, _: u32) {}
    fn dropped(&mut self, page: PageId, f: u32, dirty: bool) {
        self.dropped.push((page, f, dirty));
    }
}

type Node = GmsNode<u32, Frames, Heap, 4, 4, 4, 4>;

/// A node alone in its view (its own directory: holds register at once) holding one
/// page per flag, dirty where the flag says.
fn holding(dirty: &[bool]) -> Node {
    let mut n = Node::with_capacity(0, GmsConfig::default(), Frames::default(), 64, 64).unwrap();
    let mut rpc: Rpc<Node, u32> = Rpc::new(0, netrpc::rpc::Config::default());
    n.set_members(0, &mut rpc, 1, &[0]).unwrap();
    for (i, &d) in dirty.iter().enumerate() {
        n.hold(0, PageId::new(9, i as u64), Version(1), i as u32, 4096, d).unwrap();
    }
    n
}

proptest! {
    /// Every page asked to age out: the clean ones go (their frames handed back, not
    /// through `dropped`), the dirty ones stay held and dirty, whatever the order.
    #[test]
    fn dirty_pages_are_kept_clean_ones_go(dirty in prop::collection::vec(any::<bool>(), 1..40), rounds in 1..3usize) {
        let mut n = holding(&dirty);
        for _ in 0..rounds {
            for (i, &d) in dirty.iter().enumerate().rev() {
                let page = PageId::new(9, i as u64);
                match n.age_out(1, &page) {
                    AgeOut::Gone(h) => prop_assert!(!d && !h.dirty && h.frame == i as u32),
                    AgeOut::KeptDirty => prop_assert!(d),
                    AgeOut::NotHeld => prop_assert!(!d, "a dirty page vanished"),
                    AgeOut::Registering => prop_assert!(false, "a lone node registers at once"),
                }
            }
        }
        let kept: Vec<u64> = n.holdings().map(|(p, h)| { assert!(h.dirty); p.page }).collect();
        prop_assert_eq!(kept.len(), dirty.iter().filter(|&&d| d).count());
        prop_assert!(n.host.dropped.is_empty(), "nothing went through dropped: {:?}", n.host.dropped);
    }
}

/// A page not held is said so; a clean page goes once.
#[test]
fn a_page_goes_once() {
    let mut n = holding(&[false]);
    let page = PageId::new(9, 0);
    assert!(matches!(n.age_out(1, &page), AgeOut::Gone(_)));
    assert_eq!(n.age_out(1, &page), AgeOut::NotHeld);
    assert_eq!(n.age_out(1, &PageId::new(9, 7)), AgeOut::NotHeld);
}
