//! Reliable-connected queue pairs: creation and the INIT -> RTR -> RTS walk.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair, QueuePairAttribute, QueuePairState};
use sideway::ibverbs::AccessFlags;

use crate::device::{mtu_bytes, verbs_err, Device};
use crate::error::{Result, TransportError};

/// A window this rank offers to one writer: only the windows that name the
/// writer are ever sent to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WindowDesc {
    pub id: usize,
    pub addr: u64,
    /// Bytes of one slot.
    pub len: u64,
    pub rkey: u32,
    /// Slots (1 or 2): iteration `n` writes slot `n % slots`, at
    /// `addr + (n % slots) * len`.
    #[serde(default = "one_slot")]
    pub slots: u32,
}

fn one_slot() -> u32 {
    1
}

/// What one rank tells one peer to connect their queue pairs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ConnInfo {
    pub qpns: Vec<u32>,
    pub psns: Vec<u32>,
    pub gid: [u8; 16],
    pub lid: u16,
    pub mtu: u32,
    /// The windows the peer may write into.
    pub windows: Vec<WindowDesc>,
    /// The engines on which this rank writes to the peer: one immediate
    /// arrives from each per exchange.
    pub engines_used: Vec<usize>,
    /// How far ahead this rank grants the peer credits (1: every window the
    /// peer writes here has two slots).
    #[serde(default)]
    pub lead: u32,
}

pub(crate) struct QpSizes {
    pub send_wr: u32,
    /// Gather entries per send request.
    pub send_sge: u32,
    pub recv_wr: u32,
    pub inline: u32,
}

pub(crate) fn create_qp(
    dev: &Device,
    pd: &Arc<ProtectionDomain>,
    send_cq: &Arc<BasicCompletionQueue>,
    recv_cq: &Arc<BasicCompletionQueue>,
    sizes: &QpSizes,
) -> Result<BasicQueuePair> {
    let caps = dev.caps();
    for (what, needed) in [
        ("send queue depth", sizes.send_wr),
        ("receive queue depth", sizes.recv_wr),
    ] {
        if needed > caps.max_qp_wr {
            return Err(TransportError::Capability {
                device: caps.device.clone(),
                what: what.into(),
                needed: needed.into(),
                limit: caps.max_qp_wr.into(),
            });
        }
    }
    if sizes.send_sge > caps.max_sge {
        return Err(TransportError::Capability {
            device: caps.device.clone(),
            what: "gather entries per write".into(),
            needed: sizes.send_sge.into(),
            limit: caps.max_sge.into(),
        });
    }
    if sizes.inline > caps.max_inline {
        return Err(TransportError::Capability {
            device: caps.device.clone(),
            what: "inline data size".into(),
            needed: sizes.inline.into(),
            limit: caps.max_inline.into(),
        });
    }
    let mut qp = pd
        .create_qp_builder()
        .setup_max_send_wr(sizes.send_wr)
        .setup_max_recv_wr(sizes.recv_wr)
        .setup_max_send_sge(sizes.send_sge.max(1))
        .setup_max_recv_sge(1)
        .setup_max_inline_data(sizes.inline)
        .setup_send_cq(send_cq.clone())
        .setup_recv_cq(recv_cq.clone())
        .build()
        .map_err(|e| {
            verbs_err(
                &format!(
                    "ibv_create_qp(RC, {} send WRs, {} inline)",
                    sizes.send_wr, sizes.inline
                ),
                &caps.device,
                e,
            )
        })?;
    let mut attr = QueuePairAttribute::new();
    // Remote peers may only write (no reads, no atomics); each window's MR
    // narrows that to its own range and rkey.
    attr.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(caps.port)
        .setup_access_flags(AccessFlags::RemoteWrite);
    qp.modify(&attr)
        .map_err(|e| verbs_err("ibv_modify_qp(INIT)", &caps.device, e))?;
    Ok(qp)
}

/// Moves `qp` to RTR then RTS towards the peer's queue pair `remote_qpn`.
pub(crate) fn connect_qp(
    dev: &Device,
    qp: &mut BasicQueuePair,
    my_psn: u32,
    remote: &ConnInfo,
    engine: usize,
) -> Result<()> {
    let caps = dev.caps();
    let mtu = path_mtu(dev.mtu, remote.mtu);
    let mut ah = AddressHandleAttribute::new();
    ah.setup_dest_lid(remote.lid)
        .setup_port(caps.port)
        .setup_service_level(0)
        .setup_grh_src_gid_index(caps.gid_index as u8)
        .setup_grh_dest_gid(&Gid { raw: remote.gid })
        .setup_grh_hop_limit(64);
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(mtu)
        .setup_dest_qp_num(remote.qpns[engine])
        .setup_rq_psn(remote.psns[engine])
        .setup_max_dest_read_atomic(0)
        .setup_min_rnr_timer(12)
        .setup_address_vector(&ah);
    qp.modify(&attr).map_err(|e| {
        verbs_err(
            &format!("ibv_modify_qp(RTR, engine {engine})"),
            &caps.device,
            e,
        )
    })?;
    let mut attr = QueuePairAttribute::new();
    // timeout 14: 4.096 us * 2^14 = 67 ms per try, 7 retries: a dead peer
    // is reported as a retry-exceeded completion in about half a second.
    attr.setup_state(QueuePairState::ReadyToSend)
        .setup_sq_psn(my_psn)
        .setup_timeout(14)
        .setup_retry_cnt(7)
        .setup_rnr_retry(7)
        .setup_max_read_atomic(0);
    qp.modify(&attr).map_err(|e| {
        verbs_err(
            &format!("ibv_modify_qp(RTS, engine {engine})"),
            &caps.device,
            e,
        )
    })?;
    Ok(())
}

fn path_mtu(local: Mtu, remote_bytes: u32) -> Mtu {
    if mtu_bytes(local) <= remote_bytes {
        local
    } else {
        match remote_bytes {
            0..=256 => Mtu::Mtu256,
            257..=512 => Mtu::Mtu512,
            513..=1024 => Mtu::Mtu1024,
            1025..=2048 => Mtu::Mtu2048,
            _ => Mtu::Mtu4096,
        }
    }
}

/// A 24-bit starting packet sequence number, different per queue pair and run.
pub(crate) fn initial_psn(rank: usize, peer: usize, engine: usize) -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(rank);
    h.write_usize(peer);
    h.write_usize(engine);
    (h.finish() as u32) & 0x00ff_ffff
}
