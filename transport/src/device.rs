//! Device, port and GID selection, and the capabilities probed up front.

use std::fmt;
use std::sync::Arc;

use sideway::ibverbs::address::{Gid, GidType};
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionQueueBuilder};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer, Mtu, PortState};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{QueuePair, QueuePairAttributeMask};

use crate::error::{Result, TransportError};

/// Which device, port and GID to use. The default is the first device with
/// an active port, that port, and its RoCE v2 IPv4 GID (or GID 0 on
/// InfiniBand).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceSelector {
    /// A device name (`mlx5_0`, `rxe0`) or an index into the device list.
    pub device: Option<String>,
    /// A port number (1-based).
    pub port: Option<u8>,
    /// A GID table index.
    pub gid_index: Option<u32>,
}

impl DeviceSelector {
    /// Reads `SODE_DEVICE` (name or index), `SODE_PORT` and `SODE_GID_INDEX`.
    ///
    /// # Errors
    ///
    /// [`TransportError::InvalidSetting`](crate::TransportError::InvalidSetting) naming the variable whose value is not a
    /// name, an index or a number.
    pub fn from_env() -> Result<Self> {
        let device = std::env::var("SODE_DEVICE").ok().filter(|s| !s.is_empty());
        let port = parse_env::<u8>("SODE_PORT", "a port number from 1")?;
        let gid_index = parse_env::<u32>(
            "SODE_GID_INDEX",
            "an index into the port's GID table (see show_gids)",
        )?;
        if port == Some(0) {
            return Err(TransportError::InvalidSetting {
                name: "SODE_PORT".into(),
                value: "0".into(),
                why: "ports are numbered from 1".into(),
            });
        }
        Ok(DeviceSelector {
            device,
            port,
            gid_index,
        })
    }
}

fn parse_env<T: std::str::FromStr>(name: &str, expected: &str) -> Result<Option<T>> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => {
            v.trim()
                .parse()
                .map(Some)
                .map_err(|_| TransportError::InvalidSetting {
                    name: name.into(),
                    value: v,
                    why: format!("expected {expected}"),
                })
        }
        _ => Ok(None),
    }
}

/// What the chosen device and port can do, probed when it is opened.
#[derive(Debug, Clone)]
pub struct DeviceCaps {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u8,
    /// GID index used as source GID.
    pub gid_index: u32,
    /// That GID.
    pub gid: [u8; 16],
    /// The port's LID (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// `Ethernet` (RoCE) or `InfiniBand`.
    pub link_layer: &'static str,
    /// The port's active MTU in bytes.
    pub active_mtu: u32,
    /// Largest send or receive queue depth of a queue pair.
    pub max_qp_wr: u32,
    /// Most gather entries per work request.
    pub max_sge: u32,
    /// Largest inline payload a queue pair accepted when probed.
    pub max_inline: u32,
    /// Most entries of a completion queue.
    pub max_cqe: u32,
    /// Largest memory region.
    pub max_mr_size: u64,
    /// RLIMIT_MEMLOCK soft limit in bytes (`None`: unlimited).
    pub memlock_limit: Option<u64>,
    /// Whether this process holds CAP_IPC_LOCK (the limit does not apply).
    pub ipc_lock_capable: bool,
}

impl fmt::Display for DeviceCaps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gid = std::net::Ipv6Addr::from(self.gid);
        writeln!(
            f,
            "device      {} port {} ({})",
            self.device, self.port, self.link_layer
        )?;
        writeln!(f, "gid         index {} {}", self.gid_index, gid)?;
        writeln!(f, "mtu         {} bytes", self.active_mtu)?;
        writeln!(
            f,
            "queue depth {} work requests, {} SGEs, {} bytes inline",
            self.max_qp_wr, self.max_sge, self.max_inline
        )?;
        writeln!(f, "cq depth    {}", self.max_cqe)?;
        let limit = match self.memlock_limit {
            None => "unlimited".to_string(),
            Some(l) => format!("{l} bytes"),
        };
        write!(
            f,
            "memlock     {limit}{}",
            if self.ipc_lock_capable {
                " (CAP_IPC_LOCK: not enforced)"
            } else {
                ""
            }
        )
    }
}

/// An opened device: its context, one protection domain, and its probed
/// capabilities.
pub struct Device {
    pub(crate) pd: Arc<ProtectionDomain>,
    pub(crate) ctx: Arc<DeviceContext>,
    pub(crate) mtu: Mtu,
    caps: DeviceCaps,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("caps", &self.caps)
            .finish_non_exhaustive()
    }
}

impl Device {
    /// Opens the device `selector` names (or the first with an active port)
    /// and probes its capabilities.
    ///
    /// # Errors
    ///
    /// [`TransportError::VerbsLibraryMissing`](crate::TransportError::VerbsLibraryMissing) without libibverbs; [`TransportError::NoDevice`](crate::TransportError::NoDevice),
    /// [`TransportError::NoActivePort`](crate::TransportError::NoActivePort) or [`TransportError::NoGid`](crate::TransportError::NoGid) when nothing fits `selector`;
    /// [`TransportError::Verbs`](crate::TransportError::Verbs) when the device cannot be opened or queried.
    pub fn open(selector: &DeviceSelector) -> Result<Device> {
        let list = DeviceList::new().map_err(|e| {
            let sideway::ibverbs::device::GetDeviceListErrorKind::Ibverbs(os) = e.0 else {
                return TransportError::NoDevice {
                    wanted: String::new(),
                    found: "none".into(),
                    hint: NO_DEVICE_HINT.into(),
                };
            };
            if os.raw_os_error() == Some(libc::EOPNOTSUPP) {
                TransportError::VerbsLibraryMissing { source: os }
            } else {
                TransportError::NoDevice {
                    wanted: String::new(),
                    found: format!("none (ibv_get_device_list: {os})"),
                    hint: NO_DEVICE_HINT.into(),
                }
            }
        })?;
        let names: Vec<String> = list.iter().map(|d| d.name()).collect();
        let found = if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        };
        let candidates: Vec<usize> = match &selector.device {
            None => (0..names.len()).collect(),
            Some(want) => {
                let by_name = names.iter().position(|n| n == want);
                let by_index = want.parse::<usize>().ok().filter(|&i| i < names.len());
                match by_name.or(by_index) {
                    Some(i) => vec![i],
                    None => {
                        return Err(TransportError::NoDevice {
                            wanted: format!(" named {want:?} (SODE_DEVICE)"),
                            found,
                            hint: "set SODE_DEVICE to one of the devices found, or unset it to take the first active one".into(),
                        })
                    }
                }
            }
        };
        if candidates.is_empty() {
            return Err(TransportError::NoDevice {
                wanted: String::new(),
                found,
                hint: NO_DEVICE_HINT.into(),
            });
        }
        let mut last_err = None;
        for i in candidates {
            let dev = list.get(i).expect("index from the list");
            let name = names[i].clone();
            let ctx = dev
                .open()
                .map_err(|e| verbs_err("ibv_open_device", &name, e))?;
            match Self::from_context(ctx, name, selector) {
                Ok(d) => return Ok(d),
                // Without an explicit choice, skip devices whose ports are down.
                Err(e @ TransportError::NoActivePort { .. }) if selector.device.is_none() => {
                    last_err = Some(e)
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_err.expect("at least one candidate was tried"))
    }

    fn from_context(
        ctx: Arc<DeviceContext>,
        name: String,
        selector: &DeviceSelector,
    ) -> Result<Device> {
        let attr = ctx
            .query_device()
            .map_err(|e| verbs_err("ibv_query_device", &name, e))?;
        let ports: Vec<u8> = match selector.port {
            Some(p) => vec![p],
            None => (1..=attr.phys_port_cnt()).collect(),
        };
        let mut states = Vec::new();
        let mut chosen = None;
        for p in ports {
            let pa = ctx
                .query_port(p)
                .map_err(|e| verbs_err(&format!("ibv_query_port(port {p})"), &name, e))?;
            states.push(format!("port {p}: {:?}", pa.port_state()));
            if pa.port_state() == PortState::Active {
                chosen = Some((p, pa));
                break;
            }
        }
        let Some((port, pa)) = chosen else {
            return Err(TransportError::NoActivePort {
                device: name,
                ports: states.join(", "),
            });
        };
        let link_layer = match pa.link_layer() {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
            LinkLayer::Unspecified => "unspecified",
        };
        let (gid_index, gid) = choose_gid(&ctx, &name, port, pa.link_layer(), selector.gid_index)?;
        let mtu = pa.active_mtu();
        let pd = ctx
            .alloc_pd()
            .map_err(|e| verbs_err("ibv_alloc_pd", &name, e))?;
        let (memlock_limit, ipc_lock_capable) = memlock_status();
        let mut caps = DeviceCaps {
            device: name,
            port,
            gid_index,
            gid: gid.raw,
            lid: pa.lid(),
            link_layer,
            active_mtu: mtu_bytes(mtu),
            max_qp_wr: attr.max_qp_wr().max(0) as u32,
            max_sge: attr.max_sge().max(0) as u32,
            max_inline: 0,
            max_cqe: attr.max_cqe().max(0) as u32,
            max_mr_size: attr.max_mr_size(),
            memlock_limit,
            ipc_lock_capable,
        };
        let mut dev = Device {
            pd,
            ctx,
            mtu,
            caps: caps.clone(),
        };
        caps.max_inline = dev.probe_max_inline();
        dev.caps = caps;
        Ok(dev)
    }

    /// The capabilities probed when the device was opened.
    pub fn caps(&self) -> &DeviceCaps {
        &self.caps
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.caps.device
    }

    /// A protection domain of its own, for one peer's queue pairs and the
    /// registrations that peer may use: a key given to one peer is refused
    /// on every other peer's queue pairs.
    pub(crate) fn alloc_pd(&self) -> Result<Arc<ProtectionDomain>> {
        self.ctx
            .alloc_pd()
            .map_err(|e| verbs_err("ibv_alloc_pd", &self.caps.device, e))
    }

    pub(crate) fn create_cq(&self, depth: u32) -> Result<Arc<BasicCompletionQueue>> {
        self.create_cq_reporting(depth, None)
    }

    /// A completion queue of `depth` entries that reports its completions
    /// to `events` when armed (for blocking waits), if given.
    pub(crate) fn create_cq_reporting(
        &self,
        depth: u32,
        events: Option<&crate::verbs::CqEvents>,
    ) -> Result<Arc<BasicCompletionQueue>> {
        if depth > self.caps.max_cqe {
            return Err(TransportError::Capability {
                device: self.caps.device.clone(),
                what: "completion queue depth".into(),
                needed: depth.into(),
                limit: self.caps.max_cqe.into(),
            });
        }
        let mut builder = CompletionQueueBuilder::new(&self.ctx);
        builder.setup_cqe(depth);
        if let Some(events) = events {
            builder.setup_comp_channel(events.channel(), 0);
        }
        builder
            .build()
            .map_err(|e| verbs_err(&format!("ibv_create_cq({depth})"), &self.caps.device, e))
    }

    /// The largest inline size a queue pair accepts: providers report it only
    /// by accepting or refusing one at creation.
    fn probe_max_inline(&self) -> u32 {
        let Ok(cq) = self.create_cq(4) else { return 0 };
        for want in [1024u32, 512, 256, 128, 64] {
            let qp = self
                .pd
                .create_qp_builder()
                .setup_max_send_wr(1)
                .setup_max_recv_wr(1)
                .setup_max_inline_data(want)
                .setup_send_cq(cq.clone())
                .setup_recv_cq(cq.clone())
                .build();
            if let Ok(qp) = qp {
                let got = qp
                    .query(QueuePairAttributeMask::Capabilities)
                    .map(|(_, init)| init.max_inline_data())
                    .unwrap_or(want);
                return got.max(want);
            }
        }
        0
    }

    /// Fails with [`TransportError::MemlockTooLow`] when locking `bytes` in
    /// all would pass the soft limit and the process cannot lift it.
    ///
    /// # Errors
    ///
    /// [`TransportError::MemlockTooLow`](crate::TransportError::MemlockTooLow), as above.
    pub fn check_memlock(&self, bytes: u64) -> Result<()> {
        check_memlock(bytes, self.caps.memlock_limit, self.caps.ipc_lock_capable)
    }
}

pub(crate) fn check_memlock(bytes: u64, limit: Option<u64>, capable: bool) -> Result<()> {
    match limit {
        Some(l) if !capable && bytes > l => Err(TransportError::MemlockTooLow {
            needed: bytes,
            limit: format!("{l} bytes"),
        }),
        _ => Ok(()),
    }
}

const NO_DEVICE_HINT: &str = "install the RDMA driver and rdma-core (ibverbs-providers), check `ibv_devices`; for SoftRoCE over an Ethernet interface: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <interface>; without RDMA use the shared-memory transport";

pub(crate) fn verbs_err(
    op: &str,
    device: &str,
    e: impl std::error::Error + 'static,
) -> TransportError {
    // sideway's errors wrap the OS error; keep its text, and the errno when
    // it can be found in the chain.
    let mut source: Option<&dyn std::error::Error> = Some(&e);
    let mut errno = None;
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            errno = io.raw_os_error();
        }
        source = s.source();
    }
    let io = match errno {
        Some(n) => std::io::Error::from_raw_os_error(n),
        None => std::io::Error::other(e.to_string()),
    };
    TransportError::Verbs {
        op: op.into(),
        device: device.into(),
        source: io,
    }
}

fn choose_gid(
    ctx: &DeviceContext,
    device: &str,
    port: u8,
    link: LinkLayer,
    wanted: Option<u32>,
) -> Result<(u32, Gid)> {
    if let Some(index) = wanted {
        let gid = ctx
            .query_gid(port, index)
            .map_err(|e| TransportError::NoGid {
                device: device.into(),
                port,
                why: format!("GID index {index} (SODE_GID_INDEX) cannot be read: {e}"),
            })?;
        if gid.is_zero() {
            return Err(TransportError::NoGid {
                device: device.into(),
                port,
                why: format!("GID index {index} (SODE_GID_INDEX) is empty; list the valid ones with show_gids"),
            });
        }
        return Ok((index, gid));
    }
    if link == LinkLayer::InfiniBand {
        let gid = ctx
            .query_gid(port, 0)
            .map_err(|e| verbs_err("ibv_query_gid(0)", device, e))?;
        return Ok((0, gid));
    }
    let table = ctx
        .query_gid_table()
        .map_err(|e| verbs_err("ibv_query_gid_table", device, e))?;
    let mut seen = Vec::new();
    for entry in table.iter().filter(|e| e.port_num() == u32::from(port)) {
        let gid = entry.gid();
        let ipv4_mapped =
            gid.raw[..10].iter().all(|&b| b == 0) && gid.raw[10] == 0xff && gid.raw[11] == 0xff;
        seen.push(format!(
            "{}:{:?}{}",
            entry.gid_index(),
            entry.gid_type(),
            if ipv4_mapped { "/IPv4" } else { "" }
        ));
        if entry.gid_type() == GidType::RoceV2 && ipv4_mapped {
            return Ok((entry.gid_index(), gid));
        }
    }
    Err(TransportError::NoGid {
        device: device.into(),
        port,
        why: format!(
            "no RoCE v2 GID with an IPv4 address (seen: {}); give the network interface an IPv4 address, or choose a GID with SODE_GID_INDEX",
            if seen.is_empty() { "none".to_string() } else { seen.join(", ") }
        ),
    })
}

pub(crate) fn mtu_bytes(mtu: Mtu) -> u32 {
    match mtu {
        Mtu::Mtu256 => 256,
        Mtu::Mtu512 => 512,
        Mtu::Mtu1024 => 1024,
        Mtu::Mtu2048 => 2048,
        Mtu::Mtu4096 => 4096,
    }
}

/// The soft RLIMIT_MEMLOCK (`None`: unlimited) and whether CAP_IPC_LOCK is
/// effective (then the kernel does not enforce the limit).
fn memlock_status() -> (Option<u64>, bool) {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let limit = match getrlimit(Resource::RLIMIT_MEMLOCK) {
        Ok((soft, _)) if soft == RLIM_INFINITY => None,
        Ok((soft, _)) => Some(soft),
        Err(_) => None,
    };
    (limit, has_cap_ipc_lock())
}

fn has_cap_ipc_lock() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memlock_check_names_the_limit() {
        let e = check_memlock(1 << 20, Some(65536), false).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("1048576 bytes")
                && text.contains("65536 bytes")
                && text.contains("ulimit -l"),
            "{text}"
        );
        assert!(check_memlock(1 << 20, Some(65536), true).is_ok());
        assert!(check_memlock(1 << 20, None, false).is_ok());
        assert!(check_memlock(4096, Some(65536), false).is_ok());
    }
}
