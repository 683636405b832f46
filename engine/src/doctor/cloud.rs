//! The cloud the host runs in (from DMI), its egress cap for this vCPU count (the
//! figures from `engine/data/cloud-egress.json`), and whether the NIC is the one that cloud's
//! fast path needs (gVNIC, ENA, an accelerated-networking VF).

use super::facts::{CloudNicFacts, EgressCapFacts};
use super::{Check, Context, HostFs};
use crate::sys::hostinfo::{egress_cap, Cloud};

pub fn checks(ctx: &Context, fs: &dyn HostFs) -> Vec<Check> {
    let Some(cloud) = ctx.cloud else {
        return vec![Check::skip("cloud.platform", "not a cloud we recognise (DMI): no vendor egress cap applies")];
    };
    vec![cap(ctx, cloud), driver(ctx, cloud, fs)]
}

/// GCP: vCPUs from which the default per-VM cap stops growing (32 Gbps at 2 per vCPU).
const GCP_FULL_DEFAULT_VCPUS: u32 = 16;

fn cap(ctx: &Context, cloud: Cloud) -> Check {
    let id = "cloud.egress_cap";
    let Some(cap) = egress_cap(cloud, ctx.cpus) else {
        return Check::skip(id, format!("{}: no figures in the egress table", cloud.key()));
    };
    let facts = EgressCapFacts {
        cloud,
        vcpus: ctx.cpus,
        cap_gbps: cap.gbps,
        per_flow_gbps: cap.per_flow_gbps,
        source: cap.source,
        note: cap.note,
    };
    match cloud {
        Cloud::Gcp => {
            let gbps = cap.gbps.unwrap_or(0.0);
            if ctx.cpus < GCP_FULL_DEFAULT_VCPUS {
                Check::warn(id, format!("GCP with {} vCPUs: egress capped at {gbps} Gbit/s (about 2 per vCPU)", ctx.cpus))
                    .fix("use 16+ vCPUs for 32 Gbit/s, or n2-standard-64 with Tier_1 for 75-100 Gbit/s (scripts/gcp-tier1.sh)")
                    .facts(facts)
            } else {
                Check::pass(
                    id,
                    format!("GCP with {} vCPUs: default egress cap {gbps} Gbit/s; Tier_1 (gVNIC, 30+ vCPUs) raises it to 50-100", ctx.cpus),
                )
                .facts(facts)
            }
        }
        Cloud::Aws => Check::pass(
            id,
            format!(
                "AWS: {} Gbit/s per flow outside a cluster placement group (10 inside, 25 with ENA Express): use -P to run several flows",
                cap.per_flow_gbps.unwrap_or(5.0)
            ),
        )
        .facts(facts),
        Cloud::Azure => Check::pass(id, "Azure: egress metered per VM size; accelerated networking does not lift the cap").facts(facts),
    }
}

/// Drivers of all interfaces in the namespace, from their device/driver links.
fn all_drivers(fs: &dyn HostFs) -> Vec<(String, String)> {
    fs.list("/sys/class/net")
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| {
            let target = fs.link(&format!("/sys/class/net/{n}/device/driver")).ok()?;
            Some((n, crate::sys::hostinfo::ifstats::driver_name(&target)?))
        })
        .collect()
}

fn driver(ctx: &Context, cloud: Cloud, fs: &dyn HostFs) -> Check {
    let id = "cloud.nic";
    let d = ctx.driver().unwrap_or("unknown");
    let facts = CloudNicFacts { cloud, driver: d.into(), interfaces: all_drivers(fs) };
    match cloud {
        Cloud::Gcp if d == "gve" => Check::pass(id, "GCP gVNIC (gve): Tier_1 capable").facts(facts),
        Cloud::Gcp => Check::warn(id, format!("GCP NIC driver {d}: Tier_1 bandwidth and zero-copy need gVNIC (gve)"))
            .fix("recreate the VM with --network-interface=nic-type=GVNIC on an image that supports it (scripts/gcp-tier1.sh)")
            .facts(facts),
        Cloud::Aws if d == "ena" => Check::pass(id, "AWS ENA: enhanced networking on").facts(facts),
        Cloud::Aws => Check::warn(id, format!("AWS NIC driver {d}: enhanced networking (ENA) is off"))
            .fix("aws ec2 modify-instance-attribute --instance-id ID --ena-support   # on a stopped, ENA-capable instance type")
            .facts(facts),
        Cloud::Azure => {
            let vf = all_drivers(fs).into_iter().find(|(_, d)| matches!(d.as_str(), "mlx5_core" | "mlx4_en" | "mana"));
            match vf {
                Some((n, vd)) => Check::pass(id, format!("Azure accelerated networking: VF {n} ({vd}) under {d}")).facts(facts),
                None => Check::warn(id, format!("Azure NIC {d} without a VF: accelerated networking is off"))
                    .fix("az vm deallocate ...; az network nic update -g RG -n NIC --accelerated-networking true; az vm start ...")
                    .facts(facts),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeFs;
    use super::super::testctx::{nic_ctx, veth_ctx};
    use super::super::{Facts, Status};
    use super::*;

    #[test]
    fn no_cloud_is_skipped() {
        let c = checks(&veth_ctx(), &FakeFs::default());
        assert_eq!((c.len(), c[0].status), (1, Status::Skip));
    }

    #[test]
    fn gcp_vcpus_and_gvnic() {
        let mut small = nic_ctx("virtio_net", 4, 4);
        small.cloud = Some(Cloud::Gcp);
        let c = checks(&small, &FakeFs::default());
        assert_eq!(c[0].status, Status::Warn);
        assert!(c[0].summary.contains("capped at 8 Gbit/s"), "{}", c[0].summary);
        assert_eq!(c[1].status, Status::Warn, "virtio_net on GCP");
        let mut big = nic_ctx("gve", 16, 64);
        big.cloud = Some(Cloud::Gcp);
        let c = checks(&big, &FakeFs::default());
        assert_eq!((c[0].status, c[1].status), (Status::Pass, Status::Pass));
        let Some(Facts::EgressCap(cap)) = &c[0].facts else { panic!("{:?}", c[0].facts) };
        assert_eq!(cap.cap_gbps, Some(32.0));
    }

    #[test]
    fn aws_and_azure() {
        let mut aws = nic_ctx("ena", 8, 8);
        aws.cloud = Some(Cloud::Aws);
        let c = checks(&aws, &FakeFs::default());
        assert!(c[0].summary.contains("5 Gbit/s per flow"));
        assert_eq!(c[1].status, Status::Pass);
        let mut azure = nic_ctx("hv_netvsc", 8, 8);
        azure.cloud = Some(Cloud::Azure);
        assert_eq!(checks(&azure, &FakeFs::default())[1].status, Status::Warn, "no VF");
        let fs = FakeFs::new(&[
            ("/sys/class/net/eth0/device/driver", "->../../../bus/vmbus/drivers/hv_netvsc"),
            ("/sys/class/net/enP1s1/device/driver", "->../../../bus/pci/drivers/mlx5_core"),
        ]);
        let c = checks(&azure, &fs);
        assert_eq!(c[1].status, Status::Pass, "{}", c[1].summary);
        assert!(c[1].summary.contains("enP1s1 (mlx5_core)"));
    }
}
