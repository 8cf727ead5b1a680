//! The relation check itself (`plan::relation`): a decision that reads another path, or a ledger key, its own path
//! does not link fails at the read (debug builds), and reads through a link pass.

use super::super::fixtures::{Pv, World, at_entry, disk};
use super::{Planner, Scope};

#[test]
fn a_read_through_a_link_passes() {
    // The disk of vol1 moved to vol2; its PV at vol1 records the ids vol2 shows.
    let moved = at_entry(disk("vol1"), "vol2");
    let pv = Pv::test().bound().build();
    let world = World::new(vec![moved.clone()], vec![pv]);
    world.with_inputs(|inputs| {
        let mut planner = Planner::new(inputs, Scope::Whole);
        planner.deciding(Some(&moved.host_path));
        let found = planner.index.sharing_an_id(&moved);
        assert_eq!(found.len(), 1);
        let holder = planner.pv(found[0]).path.clone();
        assert!(planner.disk_at(&holder).is_none());
        let _ = planner.ledger(&crate::plan::identity::disk_key(&moved));
    });
}

#[test]
#[should_panic(expected = "which shares no link with it")]
fn a_read_of_an_unlinked_path_fails_at_the_read() {
    let (a, b) = (disk("vol1"), disk("vol2"));
    let world = World::new(vec![a.clone(), b.clone()], vec![]);
    world.with_inputs(|inputs| {
        let mut planner = Planner::new(inputs, Scope::Whole);
        planner.deciding(Some(&a.host_path));
        let _ = planner.disk_at(&b.host_path);
    });
}

#[test]
#[should_panic(expected = "which its path does not link")]
fn a_read_of_an_unlinked_ledger_key_fails_at_the_read() {
    let (a, b) = (disk("vol1"), disk("vol2"));
    let world = World::new(vec![a.clone(), b.clone()], vec![]);
    world.with_inputs(|inputs| {
        let mut planner = Planner::new(inputs, Scope::Whole);
        planner.deciding(Some(&a.host_path));
        let _ = planner.ledger(&crate::plan::identity::disk_key(&b));
    });
}
