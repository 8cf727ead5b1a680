//! The relation both planners derive from (`plan::relation`): what a decision at one path may read elsewhere.

use std::path::Path;

use super::super::relation::{Link, PvsByLink, Reach, disk_links, pv_links};
use super::*;

fn view(pv: &PersistentVolume) -> super::super::pv::PvView {
    super::super::pv::PvView::read(pv, &node()).expect("a PV of this node")
}

#[test]
fn a_disk_reaches_the_pv_elsewhere_that_records_its_ids() {
    // The disk of vol1 moved to vol2: its PV at vol1 records the ids the disk now shows at vol2.
    let moved = at_entry(disk("vol1"), "vol2");
    let pv = Pv::test().for_disk(&disk("vol1")).bound().uid("u1").build();
    let world = World::new(vec![moved.clone()], vec![pv.clone()]);
    let views = [view(&pv)];
    world.with_inputs(|inputs| {
        let reach = Reach::new(inputs, &views, [&moved].into_iter());
        assert!(reach.reaches(&moved.host_path, &views[0].path));
        assert!(reach.reaches(&views[0].path, &moved.host_path));
    });
}

#[test]
fn two_disks_that_share_nothing_do_not_reach_each_other() {
    let (a, b) = (disk("vol1"), disk("vol2"));
    let world = World::new(vec![a.clone(), b.clone()], vec![]);
    world.with_inputs(|inputs| {
        let reach = Reach::new(inputs, &[], [&a, &b].into_iter());
        assert!(!reach.reaches(&a.host_path, &b.host_path));
        assert!(reach.reaches(&a.host_path, &a.host_path));
        // Twins: a block copy of vol1's filesystem shows its UUID at vol2.
        let twin = with_uuid(b.clone(), "uuid-vol1");
        let reach = Reach::new(inputs, &[], [&a, &twin].into_iter());
        assert!(reach.reaches(&a.host_path, &twin.host_path));
    });
}

#[test]
fn a_path_reads_only_the_ledger_keys_it_links() {
    let a = disk("vol1");
    let world = World::new(vec![a.clone()], vec![]);
    world.with_inputs(|inputs| {
        let reach = Reach::new(inputs, &[], [&a].into_iter());
        let own = identity::disk_key(&a);
        let by_path = identity::ledger_key(a.mode, &Default::default(), None, &a.host_path);
        assert!(reach.reads_key(&a.host_path, &own));
        assert!(reach.reads_key(&a.host_path, &by_path));
        assert!(!reach.reads_key(&a.host_path, "fs-uuid:uuid-vol2"));
        assert!(!reach.reads_key(Path::new("/mnt/disks/nothing"), &own));
    });
}

#[test]
fn a_disk_links_the_name_its_pv_would_get_and_finds_a_pv_holding_it() {
    let a = disk("vol1");
    // A PV for another path carrying the name vol1's PV would get.
    let taken = Pv::test()
        .for_disk(&disk("vol2"))
        .name(&pvname::localpv_name(NODE, CLASS, "vol1"))
        .build();
    let world = World::new(vec![a.clone()], vec![taken.clone()]);
    let views = [view(&taken)];
    world.with_inputs(|inputs| {
        let name = Link::Name(pvname::localpv_name(NODE, CLASS, "vol1"));
        assert!(disk_links(inputs, &a).contains(&name));
        assert!(pv_links(&views[0]).contains(&name));
        let index = PvsByLink::new(&views);
        assert_eq!(index.linked(&name), [0]);
        assert!(Reach::new(inputs, &views, [&a].into_iter()).reaches(&a.host_path, &views[0].path));
    });
}

#[test]
fn the_index_finds_pvs_by_ids_and_names_never_by_ledger_key() {
    let pv = Pv::test().for_disk(&disk("vol1")).bound().uid("u1").build();
    let views = [view(&pv)];
    let index = PvsByLink::new(&views);
    assert_eq!(index.sharing_an_id(&disk("vol1")), vec![0]);
    assert!(index.sharing_an_id(&disk("vol2")).is_empty());
    for link in pv_links(&views[0]) {
        let found = index.linked(&link);
        match link {
            Link::Ledger(_) => assert!(found.is_empty(), "{link:?}"),
            _ => assert_eq!(found, [0], "{link:?}"),
        }
    }
    assert_eq!(index.at_path(&views[0].path), [0]);
}
