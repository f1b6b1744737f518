"""The documents the catalogue cites: every public document a figure of ``devices/`` names as its source.

A figure's :attr:`~devices.figure.Figure.source` is built with
:meth:`Document.cite`, so it names the document itself (title, publisher,
URL or document path, the date it was read, and the reproduction it was read
through when the original could not be opened).  ``devices/SOURCES.md`` is
generated from :data:`DOCUMENTS` by :mod:`devices.sources_md`
(``python -m devices.sources_md --write``), and a test keeps the two
identical and checks that every figure cites one of them.

Status follows :data:`devices.figure.STATUSES`: a vendor figure read only
through a reproduction is ``secondary`` even when the vendor's document is
the one named.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS: tuple[str, ...] = ("vendor", "press", "third party", "code", "measurement")
"""Accepted values of :attr:`Document.kind`, the headings of ``devices/SOURCES.md``."""

TODAY = "2026-12-02"


@dataclass(frozen=True, slots=True)
class Document:
    """One public document (or one recorded measurement) that catalogue figures cite."""

    title: str
    """Its own title."""
    publisher: str
    """Who published it (the vendor, the outlet, the author)."""
    url: str
    """Where it is: a URL, or a path inside a public repository."""
    read: str
    """When it was read (ISO date; a month where only that was recorded)."""
    kind: str
    """One of :data:`KINDS`."""
    via: tuple[str, ...] = ()
    """Reproductions it was read through when the original could not be opened (URLs)."""
    note: str = ""
    """What in it the catalogue uses, for ``devices/SOURCES.md``."""

    def __post_init__(self) -> None:
        for name in ("title", "publisher", "url", "read"):
            if not getattr(self, name).strip():
                raise ValueError(f"Document.{name}: every document needs one ({self.title!r})")
        if self.kind not in KINDS:
            raise ValueError(f"Document.kind: unknown kind {self.kind!r}; accepted: {', '.join(KINDS)}")

    @property
    def marker(self) -> str:
        """The part of every citation of this document that identifies it: ``(publisher, url; read date``."""
        return f"({self.publisher}, {self.url}; read {self.read}"

    def cite(self, detail: str = "") -> str:
        """A citation for a figure's source: title, the part used, publisher, URL, date read, reproductions."""
        via = f" through {', '.join(self.via)}" if self.via else ""
        where = f", {detail}" if detail else ""
        return f"{self.title}{where} {self.marker}{via})"


def _doc(title: str, publisher: str, url: str, kind: str, *, read: str = TODAY, via: tuple[str, ...] = (),
         note: str = "") -> Document:
    return Document(title, publisher, url, read, kind, via, note)


# -- NVIDIA ----------------------------------------------------------------------------------------------------
A100_DATASHEET = _doc(
    "NVIDIA A100 Tensor Core GPU datasheet", "NVIDIA",
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf", "vendor",
    via=("https://glennklockwood.com/garden/processors/A100",
         "https://www.thundercompute.com/blog/nvidia-a100-specs-full-guide"),
    note="A100 80GB SXM: dense and sparse Tensor Core rates, HBM2e 80 GB at 2,039 GB/s, NVLink 3 600 GB/s, 400 W")
A100_PAGE = _doc(
    "NVIDIA A100 Tensor Core GPU product page", "NVIDIA", "https://www.nvidia.com/en-us/data-center/a100/", "vendor",
    via=("https://xynio.com/nvidia-a100-tensor-core-gpu/",),
    note="'up to 16 A100 GPUs can be interconnected at up to 600 GB/s' through NVSwitch")
DGX_A100_GUIDE = _doc(
    "NVIDIA DGX A100 System User Guide (DU-09821-001_v01), 1.1.1 Component Specifications", "NVIDIA",
    "DU-09821-001_v01, May 2020", "vendor",
    via=("https://huggingface.co/datasets/opendatalab/OHR-Bench (its dgx_a100.json holds the guide's text)",),
    note="eight single-port ConnectX-6 VPI HDR 200 Gb/s InfiniBand adapters for the compute network, one per GPU "
         "(the guide's outline was re-read; the adapter line is as the guide and its reproductions state it)")
H100_DATASHEET = _doc(
    "NVIDIA H100 Tensor Core GPU datasheet", "NVIDIA", "https://www.nvidia.com/en-us/data-center/h100/", "vendor",
    read="2026-10",
    note="H100 SXM: dense/sparse Tensor Core rates, 80 GB HBM3 at 3.35 TB/s, NVLink 4 900 GB/s, 700 W, "
         "PCIe Gen5 128 GB/s")
HPCTECH_H100 = _doc(
    "NVIDIA H100 (reproduction of the datasheet's table)", "HPC Tech",
    "https://archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html", "third party", read="2026-10",
    note="non-tensor FP32 67 TFLOPS, FP64 Tensor Core 67, PCIe Gen5 x16 128 GB/s")
KLOCKWOOD_H100 = _doc(
    "H100 (processor notes)", "Glenn K. Lockwood", "https://glennklockwood.com/garden/processors/h100",
    "third party", read="2026-10", note="FP32 and FP64 Tensor Core 66.9 TFLOPS; the H200 has the H100's compute")
H200_DATASHEET = _doc(
    "NVIDIA H200 Tensor Core GPU datasheet", "NVIDIA", "https://www.nvidia.com/en-us/data-center/h200/", "vendor",
    read="2026-10", note="H200 SXM: 141 GB HBM3e at 4.8 TB/s; the H100's compute rates, NVLink 4 and 700 W")
HGX_B200_DATASHEET = _doc(
    "NVIDIA HGX B200 datasheet, per-GPU column", "NVIDIA", "https://www.nvidia.com/en-us/data-center/hgx/",
    "vendor", read="2026-10", note="B200: dense/sparse rates, 180 GB HBM3e at 7.7 TB/s, NVLink 5 1.8 TB/s, 1,000 W")
ZDSZERO_B200 = _doc(
    "HGX B200 specification table", "zdszero.github.io", "https://zdszero.github.io", "third party", read="2026-10",
    note="HGX B200 per GPU: FP32 75 TFLOPS, FP64 37 TFLOPS")
GB200_NVL72_PAGE = _doc(
    "NVIDIA GB200 NVL72 product page, specifications table", "NVIDIA",
    "https://www.nvidia.com/en-us/data-center/gb200-nvl72/", "vendor",
    via=("https://aiwiki.ai/wiki/nvidia_gb200_nvl72", "https://grokipedia.com/page/NVIDIA_DGX_GB200"),
    note="per NVL72 rack, Tensor Core rates with sparsity: FP4 1,440 PF, FP8/FP6 720 PF, INT8 720 POPS, "
         "FP16/BF16 360 PF, TF32 180 PF, FP64 3,240 TF; up to 13.4 TB HBM3e at 576 TB/s; NVLink 130 TB/s")
DGX_GB_USER_GUIDE = _doc(
    "NVIDIA DGX GB Rack Scale Systems User Guide, Hardware", "NVIDIA",
    "https://docs.nvidia.com/dgx/dgxgb200-user-guide/hardware.html", "vendor",
    note="18 compute trays of 2 Grace CPUs and 4 Blackwell GPUs, 9 NVLink switch trays; 4 ConnectX-7 400G "
         "NICs per compute tray")
GB300_NVL72_PAGE = _doc(
    "NVIDIA GB300 NVL72 product page, specifications table", "NVIDIA",
    "https://www.nvidia.com/en-us/data-center/gb300-nvl72/", "vendor",
    via=("https://verda.com/blog/gb300-nvl72-architecture",),
    note="per GPU, dense: FP4 15 PF, FP8 5 PF, BF16 2.5 PF, 279 GB HBM3e at 8 TB/s, NVLink 5 1.8 TB/s, 1.4 kW")
VERDA_GB300 = _doc(
    "NVIDIA GB300 NVL72: GPU Architecture & Performance", "Verda (formerly DataCrunch)",
    "https://verda.com/blog/gb300-nvl72-architecture", "third party",
    note="per-GPU table of GB300, GB200, B300, B200 without sparsity (FP32, INT8, TDP)")
KLOCKWOOD_B200 = _doc(
    "B200 (processor notes)", "Glenn K. Lockwood", "https://glennklockwood.com/garden/processors/B200",
    "third party",
    note="GB200 at 1,200 W and HGX B200 at 1,000 W, dense and sparse rates from NVIDIA's Blackwell datasheet")
KLOCKWOOD_B300 = _doc(
    "B300 (processor notes)", "Glenn K. Lockwood", "https://glennklockwood.com/garden/processors/B300",
    "third party", read="2026-10",
    note="HGX B300 FP64 1.25 TFLOPS; GB300 NVL72 gives each GPU one ConnectX-8 SuperNIC at 800 Gb/s")
NVLINK_PAGE = _doc(
    "NVIDIA NVLink and NVLink Switch product page", "NVIDIA", "https://www.nvidia.com/en-us/data-center/nvlink/",
    "vendor", via=("https://www.nvlink.lol/",),
    note="sixth-generation NVLink (Rubin) 3.6 TB/s per GPU")
BCM_NVLINK = _doc(
    "NVIDIA Mission Control / Base Command Manager manual, NVLink Technology", "NVIDIA",
    "https://docs.nvidia.com/base-command-manager/product-manuals/nvidia-mission-control/nvlinkinfo", "vendor",
    note="fifth-generation NVLink in GB200/GB300: up to 576 GPUs in a single NVLink domain")
NVLINK_FUSION_PAGE = _doc(
    "NVIDIA NVLink Fusion", "NVIDIA", "https://www.nvidia.com/en-us/data-center/nvlink-fusion/", "vendor",
    read="2026-10", note="NVLink Fusion joins third-party accelerators (Trainium4) to NVIDIA's NVLink switches")
NCCL_TUNING = _doc(
    "NCCL src/graph/tuning.cc, hwLat and baseLat tables", "NVIDIA",
    "https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc", "code",
    note="hop latencies (us), ring LL/LL128/Simple: NVLink 0.6/1.9/3.4, PCI 1.0/2.5/5.7, network 2.7/4.0/14; "
         "NVLS 25; base latency ring LL 6.6")
NCCL_TOPO = _doc(
    "NCCL src/graph/topo.h, per-generation link bandwidths (SM90_NVLINK_BW, SM100_NVLINK_BW, PCI_BW)", "NVIDIA",
    "https://github.com/NVIDIA/nccl/blob/master/src/graph/topo.h", "code",
    note="the bandwidth NCCL models per NVLink 4 link (20.6 GB/s), NVLink 5 link (40.1 GB/s) and PCIe (12 GB/s)")
NCCL_NVLS = _doc(
    "NCCL src/graph/tuning.cc, nvlsEfficiency", "NVIDIA", "https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc",
    "code", note="NVLS (NVLink SHARP) bus-bandwidth efficiency: 0.85 on Hopper, 0.74 on Blackwell")
NCCL_TESTS_119 = _doc(
    "nccl-tests issue #119, 'Evaluation of NCCL test result' (maintainer's answer)", "NVIDIA (S. Jeaugey)",
    "https://github.com/NVIDIA/nccl-tests/issues/119", "code",
    note="'24GB/s is the peak performance per 200G NIC': ~48 GB/s per 400G NDR NIC")
THAKUR_2005 = _doc(
    "Optimization of Collective Communication Operations in MPICH (R. Thakur, R. Rabenseifner, W. Gropp), "
    "International Journal of High Performance Computing Applications 19(1), 2005", "SAGE",
    "https://doi.org/10.1177/1094342005051521", "third party",
    note="the alpha-beta(-gamma) costs of ring, recursive halving/doubling, Rabenseifner and binomial schedules")
PYTORCH_MULTI_TENSOR_APPLY = _doc(
    "PyTorch aten/src/ATen/native/cuda/MultiTensorApply.cuh (multi_tensor_apply) and ForeachReduceOp.cu",
    "PyTorch", "https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/MultiTensorApply.cuh",
    "code", note="launch rule of the foreach and fused-optimizer kernels: 65,536-element chunks, 2,240 chunks "
                 "and 770/448/336/252/210 tensors (1-5 lists) per launch with 32 KB kernel arguments; norm "
                 "cleanup launches per 400 tensors")
CUDA_GRAPHS_BLOG = _doc(
    "Getting Started with CUDA Graphs", "NVIDIA Technical Blog", "https://developer.nvidia.com/blog/cuda-graphs/",
    "vendor", read="2026-10", note="kernel launch overhead of a few microseconds")

# -- AWS -------------------------------------------------------------------------------------------------------
_NEURON_HW = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/arch/neuron-hardware"
TRAINIUM_DOCS = _doc(
    "AWS Neuron documentation, Trainium architecture (about-neuron/arch/neuron-hardware/trainium.rst "
    "@81ce03ae, 2026-08-21)", "AWS", f"{_NEURON_HW}/trainium.html", "vendor",
    note="Trainium (Trn1): 2 NeuronCore-v2; dense 190 FP16/BF16/cFP8/TF32 TFLOPS (cFP8 at the BF16 rate), 47.5 FP32, "
         "380 INT8 TOPS, no FP64; 32 GiB HBM at 820 GiB/s")
TRN1_ARCH = _doc(
    "AWS Neuron documentation, Amazon EC2 Trn1/Trn1n architecture (about-neuron/arch/neuron-hardware/trn1-arch.rst "
    "@81ce03ae, 2026-08-21)", "AWS", f"{_NEURON_HW}/trn1-arch.html", "vendor",
    note="trn1.32xlarge and trn1n.32xlarge: 16 Trainium chips (32 NeuronCores) in a 2D torus, 3,040 TFLOPS, 512 GiB "
         "at 13,120 GiB/s; EFA 800 Gbps (trn1) / 1,600 Gbps (trn1n) per instance; UltraClusters of over 100,000 chips")
TRN1_ARCH_2024 = _doc(
    "AWS Neuron documentation, AWS Trn1/Trn1n architecture (general/arch/neuron-hardware/trn1-arch.rst @60224f42, "
    "2024-12-04)", "AWS",
    "aws-neuron/aws-neuron-sdk: general/arch/neuron-hardware/trn1-arch.rst", "vendor",
    note="column 'NeuronLink-v2 device-to-device (GiB/sec/device)': 384 on trn1.32xlarge, 768 on trn1n.32xlarge "
         "(direction not stated; the header dropped it at 619d4969, the rows keep it); the instance topology as a "
         "'4D-HyperCube', the graph of a 4x4 torus")
TRAINIUM2_DOCS = _doc(
    "AWS Neuron documentation v2.29, Trainium2 architecture", "AWS",
    "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.29.0/about-neuron/arch/neuron-hardware/trainium2.html",
    "vendor", note="1,299 FP8, 667 BF16/FP16/TF32, 181 FP32 TFLOPS; 96 GiB at 2.9 TB/s; NeuronLink-v3 1.28 TB/s")
TRN2_ARCH = _doc(
    "AWS Neuron documentation, Amazon EC2 Trn2 architecture", "AWS",
    "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/arch/neuron-hardware/trn2-arch.html",
    "vendor", read="2026-10",
    note="trn2.48xlarge: 16 Trainium2 in a 4x4 2D torus at 1,024 GB/s per chip, EFAv3 3.2 Tbps; Trn2 UltraServer: "
         "4 instances, 64 chips, rings of 256 GB/s per chip between instances")
TRAINIUM3_DOCS = _doc(
    "AWS Neuron documentation v2.29.1, Trainium3 architecture", "AWS",
    "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.29.1/about-neuron/arch/neuron-hardware/trainium3.html",
    "vendor", note="2,517 MXFP8/MXFP4, 671 BF16/FP16/TF32, 183 FP32 TFLOPS; 144 GiB at 4.9 TB/s; NeuronLink-v4 "
                   "2.56 TB/s per device")
TRN3_ARCH = _doc(
    "AWS Neuron SDK, Amazon EC2 Trn3 Architecture", "AWS",
    "aws-neuron/aws-neuron-sdk: about-neuron/arch/neuron-hardware/trn3-arch.rst", "vendor",
    note="Trn3 UltraServer Gen1 64 / Gen2 144 Trainium3 on NeuronSwitch-v1; EFA 12,800 / 28,800 Gbps")
TRAINIUM3_ANNOUNCEMENT = _doc(
    "Trainium3 UltraServers and Trainium4 (re:Invent 2025 announcement)", "Amazon",
    "https://www.aboutamazon.com/news/aws/trainium-3-ultraserver-faster-ai-training-lower-cost", "vendor",
    via=("https://www.nextplatform.com/compute/2025/12/03/with-trainium4-aws-will-crank-up-everything-but-the-"
         "clocks/1700879",),
    note="Trainium4: at least 3x FP8, 6x FP4, 4x memory bandwidth over Trainium3, more memory, NVLink Fusion")
TRN3_POWER_PRESS = _doc(
    "Exclusive: AWS is developing a new high-power AI chip", "Fierce Network",
    "https://fierce-network.com/cloud/exclusive-aws-will-follow-nvidia-high-power-ai-territory-trainium3-chip",
    "press", via=("https://www.datacenterdynamics.com/en/news/aws-trainium3-chips-likely-to-consume-1kw-of-power-"
                  "company-to-adopt-cold-plate-cooling/",),
    note="AWS's VP of infrastructure: Trainium3 needs liquid cooling, 'when a chip goes above 1,000 watts'")
NEURON_LNC = _doc(
    "AWS Neuron documentation, Logical NeuronCore configuration", "AWS",
    "aws-neuron/aws-neuron-sdk: about-neuron/arch/neuron-features/logical-neuroncore-config.rst", "vendor",
    note="Trn2: 8 physical NeuronCore-v3 per chip; LNC=2 (the default) exposes 4 logical NeuronCores per chip (64 per "
         "trn2.48xlarge), LNC=1 exposes 8; LNC applies to Trn2 and Trn3 only")
EC2_PRICING = _doc(
    "Amazon EC2 On-Demand Pricing", "AWS", "https://aws.amazon.com/ec2/pricing/on-demand/", "vendor",
    read="2026-10", note="p5.48xlarge $98.32/h before the June 2025 price cut (the figure as catalogued before, "
                         "not re-read)")
TRN1_PRICES_2023 = _doc(
    "AWS Neuron SDK, trn1_instance_prices.csv (@c6ec6484, 2023-02-27)", "AWS",
    "aws-neuron/aws-neuron-sdk: general/benchmarks/trn1/trn1_instance_prices.csv", "vendor",
    note="trn1.32xlarge on-demand $21.50/h (the file's figure until it was replaced in 2024-09)")
TRN1_PRICES_2024 = _doc(
    "AWS Neuron SDK, trn1_instance_prices.csv (@72825d50, 2024-09-16, current)", "AWS",
    "aws-neuron/aws-neuron-sdk: general/benchmarks/trn1/trn1_instance_prices.csv", "vendor",
    note="trn1.32xlarge $8.197/h, the reserved-instance effective rate in N. Virginia that Neuron's performance "
         "pages divide by")
EC2_CAPACITY_BLOCKS = _doc(
    "Amazon EC2 Capacity Blocks for ML Pricing", "AWS", "https://aws.amazon.com/ec2/capacityblocks/pricing/",
    "vendor", note="rates per instance-hour before 2025-01-01, read through a mirror of the page: trn1.32xlarge "
                   "$15.49 (Melbourne), p5.48xlarge $39.33 (us-east-1), 8 x H200 $43.26 (Ohio; the instance name "
                   "was lost in the mirror), p4d.24xlarge $14.75 (Ohio)")

# -- aggregators, press and estimates -------------------------------------------------------------------------
VANTAGE_2026 = _doc(
    "Vantage EC2 instance comparison, on-demand rates quoted in a third-party note of 2026-04-23", "Vantage",
    "https://instances.vantage.sh/", "third party", read="2026-04-23",
    note="p5.48xlarge $55.04/h after AWS's June 2025 cut ('up to 45 %'); p6-b200.48xlarge $113.93/h")
VANTAGE_FIXTURE = _doc(
    "Vantage EC2 instance comparison values held in a public test fixture (weak: not re-read at Vantage)", "Vantage",
    "https://instances.vantage.sh/", "third party",
    note="p5en.48xlarge (8 x H200) $63.296/h, p4d.24xlarge (8 x A100) $21.958/h on demand")
NEXTPLATFORM_GB200 = _doc(
    "The Next Platform on AWS P6e-GB200 UltraServers (2025-07-10)", "The Next Platform",
    "https://www.nextplatform.com/", "press",
    note="a P6e-GB200 UltraServer of 72 GPUs at about $1.65M per 90 days of capacity blocks (~$764/h, an estimate)")
SEMIANALYSIS_TRN2 = _doc(
    "Trainium2 Architecture & Networking (Dec 2024)", "SemiAnalysis", "https://semianalysis.com/", "third party",
    via=("https://nand-research.com/",), note="Trainium2 at about 500 W per chip (an estimate; AWS gives no figure)")
MLPERF_INFERENCE_41 = _doc(
    "MLPerf Inference v4.1 results, closed/NVIDIA/systems (H200-SXM-141GBx8_TRT.json, B200-SXM-180GBx1_TRT.json)",
    "MLCommons", "https://github.com/mlcommons/inference_results_v4.1", "vendor",
    note="system descriptions @198fc467: 'H200 TGP 700W', 'B200 TGP 1000W'")
MLPERF_INFERENCE_51 = _doc(
    "MLPerf Inference v5.1 results, closed/NVIDIA/systems (B200-SXM-180GBx8_TRT.json, "
    "GB200-NVL72_GB200-186GB_aarch64x4_TRT.json, GB300-NVL72_GB300-288GB_aarch64x72_TRT.json)",
    "MLCommons", "https://github.com/mlcommons/inference_results_v5.1", "vendor",
    note="system descriptions @965182b0: 'B200 TGP 1000W', 'GB200 TGP 1200W', 'GB300 TGP 1400W'")

# -- papers and measurements -------------------------------------------------------------------------------------
FLASHATTENTION3 = _doc(
    "FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision (Shah et al., 2024)",
    "arXiv", "https://arxiv.org/abs/2407.08608", "third party", read="2026-10",
    note="Figs. 5-6: FlashAttention-2 forward/backward TFLOP/s on H100 SXM5, head dim 128, seq 512-16k; "
         "Section 3.1: 'the H100 SXM5 GPU has 989 TFLOPS of FP16 matmul but only 3.9 TFLOPS of special functions'")
CUDA_PROGRAMMING_GUIDE = _doc(
    "CUDA C++ Programming Guide, Arithmetic Instructions: throughput of native arithmetic instructions "
    "(operations per clock cycle per multiprocessor)", "NVIDIA",
    "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#arithmetic-instructions", "vendor",
    read="2026-12-05",
    note="32-bit reciprocal, reciprocal square root, base-2 logarithm and exponential (exp2f), sine, cosine: "
         "16 results per clock per SM for compute capabilities 5.x to 9.0")
BLACKWELL_ULTRA_SOFTMAX = _doc(
    "Making Softmax More Efficient with NVIDIA Blackwell Ultra", "NVIDIA Technical Blog",
    "https://developer.nvidia.com/blog/making-softmax-more-efficient-with-nvidia-blackwell-ultra/", "vendor",
    read="2026-12-05",
    note="Blackwell Ultra doubles the SFU throughput (MUFU.EX2) of Blackwell; its micro-benchmark measures about "
         "2x on GB300 over GB200")
LAUNCH_MEASUREMENT = _doc(
    "pegainfer part 3: CUDA graphs", "susun-blog", "https://susun-blog.com/blog/pegainfer-3-cuda-graph",
    "third party", read="2026-10", note="4-6 us per kernel launch in a launch-and-sync loop (CUDA 13)")
H200_MEASUREMENTS = _doc(
    "Measured through PyTorch on one NVIDIA H200 (not a published document)", "hybrid-interop maintainers",
    "recorded in the project's reference notes", "measurement", read="2026-10",
    note="8192^3 bf16 matmul 769-798 TFLOP/s on random data; device-to-device copy ~4.3 TB/s read+write")

DOCUMENTS: tuple[Document, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, Document))
"""Every document the catalogue, the fabrics and the cost model cite, in the order above."""


def cited(text: str) -> tuple[int, ...]:
    """The numbers of the documents a citation names (1-based positions in :data:`DOCUMENTS`), in that order."""
    return tuple(i for i, doc in enumerate(DOCUMENTS, 1) if doc.marker in text)
