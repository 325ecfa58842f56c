#!/usr/bin/env python3
"""Writes the hwloc v2 XML test topologies p4d-like.xml and p5-like.xml.

They model AWS hosts, not copies of real dumps: 2 packages (one NUMA node each, 2 hardware
threads per core, Linux-style CPU numbering where the second thread of every core comes after
all the first threads), 8 NVIDIA GPUs and EFA NICs behind PCIe switches.

  p4d-like: 2 x 24 cores, 8 A100, 4 EFA; 4 switches (2 per package), each one PCI-to-PCI
            bridge with 2 GPUs, 1 EFA, 1 NVSwitch and 1 NVMe drive on its secondary bus.
  p5-like:  2 x 48 cores, 8 H100, 32 EFA; 8 switches (4 per package), each an upstream port
            with 5 downstream ports: 4 EFA and 1 GPU.

Usage: python3 gen_topo.py [output-dir]   (default: this file's directory)
"""
import os
import sys


def mask_hex(cpus):
    """hwloc's bitmap text: 32-bit words, most significant first, e.g. 0x000000ff,0xffffffff."""
    value = 0
    for c in cpus:
        value |= 1 << c
    words = []
    while True:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        if value == 0:
            break
    return ",".join("0x%08x" % w for w in reversed(words))


class Writer:
    def __init__(self):
        self.lines = []
        self.gp = 0

    def gp_index(self):
        self.gp += 1
        return self.gp

    def open(self, depth, attrs, infos=(), leaf=False):
        text = " ".join('%s="%s"' % kv for kv in attrs)
        pad = "  " * depth
        if leaf and not infos:
            self.lines.append("%s<object %s/>" % (pad, text))
            return
        self.lines.append("%s<object %s>" % (pad, text))
        for name, value in infos:
            self.lines.append('%s  <info name="%s" value="%s"/>' % (pad, name, value))
        if leaf:
            self.close(depth)

    def close(self, depth):
        self.lines.append("  " * depth + "</object>")


def cpusets(obj_cpus, nodes):
    node_mask = mask_hex(nodes)
    return [("cpuset", mask_hex(obj_cpus)), ("complete_cpuset", mask_hex(obj_cpus)),
            ("nodeset", node_mask), ("complete_nodeset", node_mask)]


def pci_attrs(busid, cls, vendor, device, subvendor, subdevice, rev):
    return [("pci_busid", busid),
            ("pci_type", "%04x [%04x:%04x] [%04x:%04x] %02x" %
             (cls, vendor, device, subvendor, subdevice, rev)),
            ("pci_link_speed", "15.753846")]


def host_bridge(w, depth, first_bus, last_bus):
    w.open(depth, [("type", "Bridge"), ("gp_index", w.gp_index()), ("bridge_type", "0-1"),
                   ("depth", "0"), ("bridge_pci", "0000:[%02x-%02x]" % (first_bus, last_bus))])


def pci_bridge(w, depth, bus, dev, bdepth, first_bus, last_bus):
    attrs = [("type", "Bridge"), ("gp_index", w.gp_index()), ("bridge_type", "1-1"),
             ("depth", str(bdepth)), ("bridge_pci", "0000:[%02x-%02x]" % (first_bus, last_bus))]
    attrs += pci_attrs("0000:%02x:%02x.0" % (bus, dev), 0x0604, 0x1000, 0xc010, 0x1000, 0xa064, 0xb0)
    w.open(depth, attrs)


def pci_device(w, depth, bus, dev, ids, infos, osdevs):
    cls, vendor, device, subvendor, subdevice, rev = ids
    attrs = [("type", "PCIDev"), ("gp_index", w.gp_index())]
    attrs += pci_attrs("0000:%02x:%02x.0" % (bus, dev), cls, vendor, device, subvendor, subdevice, rev)
    w.open(depth, attrs, infos, leaf=not osdevs)
    if not osdevs:
        return
    for name, osdev_type, os_infos in osdevs:
        w.open(depth + 1, [("type", "OSDev"), ("gp_index", w.gp_index()), ("name", name),
                           ("osdev_type", str(osdev_type))], os_infos, leaf=True)
    w.close(depth)


OSDEV_BLOCK, OSDEV_GPU, OSDEV_NETWORK, OSDEV_OPENFABRICS, OSDEV_DMA, OSDEV_COPROC = range(6)


def gpu(w, depth, bus, dev, index, model, device_id, pci_name):
    infos = [("PCIVendor", "NVIDIA Corporation"), ("PCIDevice", pci_name)]
    gpu_infos = [("GPUVendor", "NVIDIA Corporation"), ("GPUModel", model)]
    osdevs = [("cuda%d" % index, OSDEV_COPROC,
               [("CoProcType", "CUDA"), ("Backend", "CUDA")] + gpu_infos),
              ("nvml%d" % index, OSDEV_GPU, [("Backend", "NVML")] + gpu_infos)]
    pci_device(w, depth, bus, dev, (0x0302, 0x10DE, device_id, 0x10DE, 0x1463, 0xA1), infos, osdevs)


def efa(w, depth, bus, dev, device_id):
    infos = [("PCIVendor", "Amazon.com, Inc."), ("PCIDevice", "Elastic Fabric Adapter (EFA)")]
    osdevs = [("rdmap%ds%d" % (bus, dev), OSDEV_OPENFABRICS, [])]
    pci_device(w, depth, bus, dev, (0x0200, 0x1D0F, device_id, 0x0000, 0x0000, 0x00), infos, osdevs)


def write_topology(path, host, cores_per_package, cpu_model, memory, switch_fn, switches):
    packages = 2
    threads = 2
    total = packages * cores_per_package

    def cpu_of(p, c, t):
        return t * total + p * cores_per_package + c

    all_cpus = [cpu_of(p, c, t) for p in range(packages) for c in range(cores_per_package)
                for t in range(threads)]
    w = Writer()
    w.lines += ['<?xml version="1.0" encoding="UTF-8"?>',
                '<!DOCTYPE topology SYSTEM "hwloc2.dtd">', '<topology version="2.0">']
    attrs = [("type", "Machine"), ("os_index", "0")] + cpusets(all_cpus, range(packages))
    attrs.insert(4, ("allowed_cpuset", mask_hex(all_cpus)))
    attrs.append(("allowed_nodeset", mask_hex(range(packages))))
    attrs.append(("gp_index", w.gp_index()))
    w.open(1, attrs, [("Backend", "Linux"), ("OSName", "Linux"), ("HostName", host),
                      ("Architecture", "x86_64"), ("hwlocVersion", "2.9.0")])
    gpu_index = 0
    for p in range(packages):
        cpus = [cpu_of(p, c, t) for c in range(cores_per_package) for t in range(threads)]
        w.open(2, [("type", "Package"), ("os_index", p)] + cpusets(cpus, [p]) +
               [("gp_index", w.gp_index())], [("CPUVendor", "GenuineIntel"), ("CPUModel", cpu_model)])
        w.open(3, [("type", "NUMANode"), ("os_index", p)] + cpusets(cpus, [p]) +
               [("gp_index", w.gp_index()), ("local_memory", memory)])
        w.lines.append('        <page_type size="4096" count="%d"/>' % (memory // 4096))
        w.close(3)
        for c in range(cores_per_package):
            core_cpus = [cpu_of(p, c, t) for t in range(threads)]
            w.open(3, [("type", "Core"), ("os_index", c)] + cpusets(core_cpus, [p]) +
                   [("gp_index", w.gp_index())])
            for cpu in core_cpus:
                w.open(4, [("type", "PU"), ("os_index", cpu)] + cpusets([cpu], [p]) +
                       [("gp_index", w.gp_index())], leaf=True)
            w.close(3)
        for s in switches[p]:
            gpu_index = switch_fn(w, 3, s, gpu_index)
        w.close(2)
    w.close(1)
    w.lines += ['  <support name="discovery.pu"/>', '  <support name="discovery.numa"/>',
                '  <support name="discovery.numa_memory"/>', "</topology>", ""]
    with open(path, "w") as f:
        f.write("\n".join(w.lines))


def p4d_switch(w, depth, bus, gpu_index):
    # Host bridge -> one PCI-to-PCI bridge whose secondary bus holds EFA, 2 GPUs, NVSwitch, NVMe.
    host_bridge(w, depth, bus - 1, bus)
    pci_bridge(w, depth + 1, bus - 1, 0, 1, bus, bus)
    efa(w, depth + 2, bus, 0x1B, 0xEFA0)
    for dev in (0x1C, 0x1D):
        gpu(w, depth + 2, bus, dev, gpu_index, "NVIDIA A100-SXM4-40GB", 0x20B0,
            "GA100 [A100 SXM4 40GB]")
        gpu_index += 1
    pci_device(w, depth + 2, bus, 0x1E, (0x0680, 0x10DE, 0x1AF1, 0x10DE, 0x1652, 0xA1),
               [("PCIVendor", "NVIDIA Corporation"), ("PCIDevice", "GA100 [NVSwitch]")], [])
    pci_device(w, depth + 2, bus, 0x1F, (0x0108, 0x1D0F, 0xCD01, 0x1D0F, 0xCD01, 0x00),
               [("PCIVendor", "Amazon.com, Inc."), ("PCIDevice", "NVMe SSD Controller")],
               [("nvme%dn1" % (gpu_index // 2 - 1), OSDEV_BLOCK, [])])
    w.close(depth + 1)
    w.close(depth)
    return gpu_index


def p5_switch(w, depth, gpu_bus, gpu_index):
    # Host bridge -> upstream port (bus s) -> 5 downstream ports (bus s+1) -> 4 EFA + 1 GPU.
    s = gpu_bus - 6
    host_bridge(w, depth, s, gpu_bus)
    pci_bridge(w, depth + 1, s, 0, 1, s + 1, gpu_bus)
    for port in range(5):
        bus = s + 2 + port
        pci_bridge(w, depth + 2, s + 1, port, 2, bus, bus)
        if port < 4:
            efa(w, depth + 3, bus, 0, 0xEFA1)
        else:
            gpu(w, depth + 3, bus, 0, gpu_index, "NVIDIA H100 80GB HBM3", 0x2330,
                "GH100 [H100 SXM5 80GB]")
            gpu_index += 1
        w.close(depth + 2)
    w.close(depth + 1)
    w.close(depth)
    return gpu_index


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    write_topology(os.path.join(out, "p4d-like.xml"), "p4d-like", 24,
                   "Intel(R) Xeon(R) Platinum 8275CL CPU @ 3.00GHz", 580 << 30, p4d_switch,
                   [[0x10, 0x20], [0x90, 0xA0]])
    write_topology(os.path.join(out, "p5-like.xml"), "p5-like", 48,
                   "AMD EPYC 7R13 Processor", 1000 << 30, p5_switch,
                   [[0x53, 0x64, 0x75, 0x86], [0x97, 0xA8, 0xB9, 0xCA]])


if __name__ == "__main__":
    main()
