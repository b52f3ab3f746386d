// Runs race.html's replay script in node against a minimal stand-in for the DOM and
// prints, as JSON, what the page shows: the clock, each lane's text, its shaded blocks
// and bar width at the end, and each lane's text length at every frame.
// Usage: node race_page_replay.js race.html   (frames are 10 ms of page time apart)
const fs = require('fs');
const page = fs.readFileSync(process.argv[2], 'utf8');
const data = page.match(/<script type="application\/json" id="race-data">([\s\S]*?)<\/script>/)[1];
const code = page.match(/<script>([\s\S]*?)<\/script>/)[1];

function element() {
  return {style: {}, children: [], className: '', own: '',
    get textContent() { return this.children.length ? this.children.map(c => c.textContent).join('') : this.own; },
    set textContent(v) { this.children = []; this.own = v; },
    appendChild(c) { this.children.push(c); }};
}
const elements = {};
global.document = {
  getElementById: id => id === 'race-data' ? {textContent: data} : (elements[id] = elements[id] || element()),
  querySelectorAll: () => [],
  createElement: () => element()};
const frames = [];
global.requestAnimationFrame = f => frames.push(f);
global.cancelAnimationFrame = () => {};
new Function(code)();

const lanes = JSON.parse(data).lanes.map((_, i) => i);
const lengths = [];
for (let now = 0; frames.length; now += 10) {
  frames.shift()(now);
  lengths.push(lanes.map(i => elements['text-' + i].textContent.length));
}
console.log(JSON.stringify({
  t: elements['t'].textContent,
  texts: lanes.map(i => elements['text-' + i].textContent),
  blocks: lanes.map(i => elements['text-' + i].children.map(c => c.className)),
  widths: lanes.map(i => elements['fill-' + i].style.width),
  lengths}));
