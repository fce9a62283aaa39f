"""The whole-model picture of a lowering report (`--report-svg FILE`): one box per segment in
run order, its layers inside as cells coloured by where they run (arrays, the NPU's vector
unit, the CPU), the box's header giving MACs, bytes in and out and each unit's work, and
the hand-overs between boxes. Below them the chip (chip/estimate.py): its floor plan, one
square per array coloured by the layer it holds (copies and groups of a model larger than
the chip drawn apart), and the simulated timeline of one image, a row per unit. Plain SVG
built with ElementTree, so it is well-formed XML; every cell and bar has a <title> naming
what it is (a tooltip in a browser)."""
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
                f"{est['transfers']} hand-over(s), {_bytes(est['bytes_crossing'])}; work "
                f"{_latency(est['ns'], est['total_ns'])}" if est and est["macs"] else ""))
    y = 60
    boxes = []
    for s in report.segments:
        h = HEAD + _cells_height(len(s.layers) or 1) + PAD
        boxes.append((s, y, h))
        y += h + 24
    chip_top = y
    if report.chip is not None:
        y += _chip_height(report.chip)
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
    if report.chip is not None:
        _draw_chip(svg, report.chip, chip_top)
    return ET.tostring(svg, encoding="unicode", xml_declaration=True)


ARRAY, BAR = 9, 10          # an array's square; a timeline row's height


def _layer_colour(i):
    return f"hsl({(i * 47) % 360}, 60%, 48%)"


def _floor_rows(chip):
    """Per group: [(layer, copy, arrays)] in the order the arrays are given out."""
    m = chip.mapping
    return [[(n, c, a) for n, a in grp for c in range(m.copies.get(n, 1))] for grp in m.groups]


def _floor_height(count):
    per_row = (WIDTH - 2 * PAD) // (ARRAY + 1)
    return max(1, -(-count // per_row)) * (ARRAY + 1)


def _timeline_units(chip):
    """The units that worked, in the order they started."""
    return sorted((u for u, spans in chip.timeline.items() if spans),
                  key=lambda u: (chip.timeline[u][0][0], u))


def _chip_height(chip):
    m = chip.mapping
    count = m.available or m.needed
    plan = sum(24 + _floor_height(max(count, 1)) for _ in (m.groups or [[]]))
    return 46 + plan + 30 + len(_timeline_units(chip)) * (BAR + 2) + 30


def _draw_chip(svg, chip, top):
    """The floor plan and the timeline below the segments."""
    m = chip.mapping
    count = m.available or m.needed
    group = ET.SubElement(svg, "g", id="chip")
    for k, line in enumerate(chip.lines()[:2]):
        ET.SubElement(group, "text", x=str(PAD), y=str(top + 16 + 16 * k),
                      attrib={"font-weight": "bold" if k == 0 else "normal"}).text = line.strip()
    colours = {}
    for grp in m.groups:
        for n, _ in grp:
            colours.setdefault(n, _layer_colour(len(colours)))
    per_row = (WIDTH - 2 * PAD) // (ARRAY + 1)
    y = top + 46
    for gi, held in enumerate(_floor_rows(chip) or [[]]):
        used = sum(a for _, _, a in held)
        label = f"group {gi + 1} of {len(m.groups)}: " if len(m.groups) > 1 else ""
        ET.SubElement(group, "text", x=str(PAD), y=str(y + 12)).text = \
            f"{label}{used} of {count} arrays"
        y += 20
        k = 0
        for n, c, a in held:
            for _ in range(a):
                cell = ET.SubElement(group, "rect", x=str(PAD + (k % per_row) * (ARRAY + 1)),
                                     y=str(y + (k // per_row) * (ARRAY + 1)),
                                     width=str(ARRAY), height=str(ARRAY), fill=colours[n],
                                     attrib={"fill-opacity": "1" if c == 0 else "0.55"})
                ET.SubElement(cell, "title").text = n + (f" (copy {c + 1})" if c else "")
                k += 1
        for j in range(k, count):
            ET.SubElement(group, "rect", x=str(PAD + (j % per_row) * (ARRAY + 1)),
                          y=str(y + (j // per_row) * (ARRAY + 1)), width=str(ARRAY),
                          height=str(ARRAY), fill="#e8e8e8")
        y += _floor_height(max(count, 1)) + 4
    y += 10
    ET.SubElement(group, "text", x=str(PAD), y=str(y + 12)).text = \
        f"one image's timeline: 0 .. {chip.latency_ns / 1000:.1f} us"
    y += 20
    units = _timeline_units(chip)
    left = 170
    scale = (WIDTH - left) / chip.latency_ns if chip.latency_ns else 0.0
    for r, u in enumerate(units):
        row_y = y + r * (BAR + 2)
        name = u[len("layer:"):] if u.startswith("layer:") else u
        ET.SubElement(group, "text", x=str(PAD), y=str(row_y + BAR - 1),
                      attrib={"font-size": "9"}).text = name[-28:]
        fill = colours.get(name, COLOURS["cpu"] if u == "cpu" else "#7fb2e5")
        for start, end in chip.timeline[u]:
            bar = ET.SubElement(group, "rect", x=f"{PAD + left + start * scale:.1f}",
                                y=str(row_y), width=f"{max(0.5, (end - start) * scale):.1f}",
                                height=str(BAR), fill=fill)
            ET.SubElement(bar, "title").text = \
                f"{name}: {start / 1000:.1f} .. {end / 1000:.1f} us"
