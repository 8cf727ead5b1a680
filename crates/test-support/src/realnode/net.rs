//! The run's network: one bridge with a /16 of its own (the bridge address is the API server's address, the node
//! IP of both kubelets and the pods' gateway), and one iptables nat chain that stands in for kube-proxy for the
//! only Service pods use, `kubernetes` (DNAT of 10.96.0.1:443 to the API server). The chain is jumped to only
//! for packets arriving on this bridge, so it changes nothing else on the host.

use std::process::Command;

use super::undo::Undo;
use crate::cluster::KUBERNETES_SERVICE_IP;
use crate::disks::run;

pub struct Network {
    pub bridge: String,
    pub chain: String,
    /// The second octet of 10.x.0.0/16.
    pub octet: u8,
}

impl Network {
    /// Creates the bridge on a 10.x.0.0/16 no address or route of this host uses yet.
    pub fn create(id: &str, undo: &Undo) -> Network {
        let bridge = format!("lpv{id}").chars().take(15).collect::<String>();
        let chain = format!("LPV-{id}").to_uppercase();
        let used =
            run("ip", &["-4", "route", "show", "table", "all"]) + &run("ip", &["-4", "addr"]);
        let seed = std::process::id() as usize + id.bytes().map(usize::from).sum::<usize>();
        let octet = (0..50)
            .map(|i| 200 + ((seed + i * 7) % 50) as u8)
            .find(|o| !used.contains(&format!("10.{o}.")))
            .expect("a free 10.x.0.0/16 among 10.200-10.249 for the test bridge");
        undo.push(&format!("ip link del {bridge}"));
        run("ip", &["link", "add", &bridge, "type", "bridge"]);
        run(
            "ip",
            &["addr", "add", &format!("10.{octet}.0.1/16"), "dev", &bridge],
        );
        run("ip", &["link", "set", &bridge, "up"]);
        Network {
            bridge,
            chain,
            octet,
        }
    }

    /// The bridge's own address.
    pub fn gateway(&self) -> String {
        format!("10.{}.0.1", self.octet)
    }

    /// The pods' subnet of node `index` (1-based): 10.x.<index>.0/24, inside the bridge's /16.
    pub fn pod_cidr(&self, index: usize) -> String {
        format!("10.{}.{index}.0/24", self.octet)
    }

    /// DNATs the `kubernetes` Service (443) to the API server at `gateway():port`, for pods on this bridge.
    pub fn route_kubernetes_service(&self, api_port: u16, undo: &Undo) {
        let (chain, bridge) = (&self.chain, &self.bridge);
        undo.push(&format!("iptables -w -t nat -X {chain}"));
        undo.push(&format!("iptables -w -t nat -F {chain}"));
        run("iptables", &["-w", "-t", "nat", "-N", chain]);
        run(
            "iptables",
            &[
                "-w",
                "-t",
                "nat",
                "-A",
                chain,
                "-d",
                &format!("{KUBERNETES_SERVICE_IP}/32"),
                "-p",
                "tcp",
                "--dport",
                "443",
                "-j",
                "DNAT",
                "--to-destination",
                &format!("{}:{api_port}", self.gateway()),
            ],
        );
        undo.push(&format!(
            "iptables -w -t nat -D PREROUTING -i {bridge} -j {chain}"
        ));
        run(
            "iptables",
            &[
                "-w",
                "-t",
                "nat",
                "-I",
                "PREROUTING",
                "-i",
                bridge,
                "-j",
                chain,
            ],
        );
    }
}

/// True when the kernel and tools a real-node run needs are here; otherwise the missing piece.
pub fn check_tools() -> Result<(), String> {
    for tool in [
        "ip",
        "iptables",
        "unshare",
        "containerd",
        "runc",
        "ctr",
        "buildah",
        "losetup",
    ] {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !found {
            return Err(format!(
                "{tool} (scripts/prereqs.sh installs containerd, runc, containernetworking-plugins, iptables, buildah, busybox-static)"
            ));
        }
    }
    for f in [
        "/usr/lib/cni/bridge",
        "/usr/lib/cni/host-local",
        "/usr/lib/cni/loopback",
        "/bin/busybox",
    ] {
        if !std::path::Path::new(f).exists() {
            return Err(format!(
                "{f} (apt-get install containernetworking-plugins busybox-static)"
            ));
        }
    }
    Ok(())
}
