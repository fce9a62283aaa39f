"""The whole-model picture of a lowering report (`--report-svg FILE`): one box per segment in
run order, its layers inside as cells coloured by where they run (arrays, the NPU's vector
unit, the CPU), the box's header giving MACs, bytes in and out and the estimated latency, and
the hand-overs between boxes. Plain SVG built with ElementTree, so it is well-formed XML;
every cell has a <title> naming the layer (a tooltip in a browser)."""
import xml.etree.ElementTree as ET

from . import _bytes, _cost_line, _latency, _macs

COLOURS = {"arrays": "#1f5fae", "vector": "#7fb2e5", "cpu": "#f0a030"}
LEGEND = {"arrays": "NPU arrays", "vector": "NPU vector unit / table / moves", "cpu": "CPU"}
BOX = {"npu": "#1f5fae", "cpu": "#c87800"}
WIDTH, CELL, GAP, PAD, HEAD = 960, 12, 2, 10, 34


def _cells_height(n):
    per_row = (WIDTH - 2 * PAD) // (CELL + GAP)
    return max(1, -(-n // per_row)) * (CELL + GAP)


def render_svg(report):
    """The picture as SVG text."""
    est = report.estimate()
    t = report.target
    title = (f"{t['name']}: {len(report.segments)} segment(s)"
             + (f"; {_macs(est['macs'])} MACs, {est['npu_macs'] / est['macs']:.1%} on the NPU; "
                f"{est['transfers']} hand-over(s), {_bytes(est['bytes_crossing'])}; estimated "
                f"{_latency(est['ns'], est['total_ns'])}" if est and est["macs"] else ""))
    y = 60
    boxes = []
    for s in report.segments:
        h = HEAD + _cells_height(len(s.layers) or 1) + PAD
        boxes.append((s, y, h))
        y += h + 24
    svg = ET.Element("svg", xmlns="http://www.w3.org/2000/svg", width=str(WIDTH + 2 * PAD),
                     height=str(y + 10), viewBox=f"0 0 {WIDTH + 2 * PAD} {y + 10}")
    svg.set("font-family", "sans-serif")
    svg.set("font-size", "12")
    ET.SubElement(svg, "title").text = f"paddle_npu lowering: {title}"
    ET.SubElement(svg, "text", x=str(PAD), y="20", attrib={"font-weight": "bold"}).text = title
    x = PAD
    for unit, label in LEGEND.items():
        ET.SubElement(svg, "rect", x=str(x), y="32", width=str(CELL), height=str(CELL),
                      fill=COLOURS[unit])
        ET.SubElement(svg, "text", x=str(x + CELL + 4), y="43").text = label
        x += CELL + 12 + 7 * len(label)
    per_row = (WIDTH - 2 * PAD) // (CELL + GAP)
    for k, (s, top, h) in enumerate(boxes):
        group = ET.SubElement(svg, "g", id=f"segment{s.index}")
        ET.SubElement(group, "title").text = f"segment #{s.index} ({s.device.upper()})"
        ET.SubElement(group, "rect", x=str(PAD), y=str(top), width=str(WIDTH), height=str(h),
                      fill="none", stroke=BOX[s.device], rx="4",
                      attrib={"stroke-width": "2"})
        head = f"#{s.index} {s.device.upper()}: {len(s.nodes)} nodes, {len(s.layers)} layers"
        if s.cost is not None:
            head += "; " + _cost_line(s.cost)
        ET.SubElement(group, "text", x=str(2 * PAD), y=str(top + 20)).text = head
        for i, (layer, unit, nodes) in enumerate(s.layers):
            cx = 2 * PAD + (i % per_row) * (CELL + GAP)
            cy = top + HEAD + (i // per_row) * (CELL + GAP)
            cell = ET.SubElement(group, "rect", x=str(cx), y=str(cy), width=str(CELL),
                                 height=str(CELL), fill=COLOURS[unit])
            why = (report.cpu_reasons or {}).get(layer) if unit == "cpu" else None
            ET.SubElement(cell, "title").text = (f"{layer} ({unit}, {nodes} node(s))"
                                                 + (f": {why}" if why else ""))
        if k + 1 < len(boxes):
            nxt = boxes[k + 1][0]
            crossing = ", ".join(nxt.inputs[:4]) + (f" (+{len(nxt.inputs) - 4})"
                                                    if len(nxt.inputs) > 4 else "")
            ET.SubElement(svg, "text", x=str(2 * PAD), y=str(top + h + 16),
                          attrib={"fill": "#555"}).text = f"\u2193 {crossing}"
    return ET.tostring(svg, encoding="unicode", xml_declaration=True)
