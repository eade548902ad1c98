// Sphinx's search lists a section on its own only when the query is a substring of at least half of the
// section's title, so the words a reader types ("join before drain") find the page of chapter 06 but
// not its section "4. Queues: joining before draining, ...". This adds, above the page results, every
// section whose title holds all of the query's words, stemmed as Sphinx stems them (searchtools.js and
// language_data.js define Search, Stemmer, splitQuery and SearchResultKind; this file loads after them).
// It also finds the error index's entry for a whole error message pasted into the search box.
(() => {
  if (typeof Search === "undefined" || typeof Stemmer === "undefined") return;
  const pageResults = Search._performSearch;
  Search._performSearch = (query, searchTerms, excludedTerms, highlightTerms, objectTerms) => {
    const results = pageResults(query, searchTerms, excludedTerms, highlightTerms, objectTerms);
    const terms = [...searchTerms];
    const index = Search._index;
    if (!terms.length || !index || !index.alltitles) return results;
    const stemmer = new Stemmer();
    const sections = [];
    for (const [title, found] of Object.entries(index.alltitles)) {
      const words = new Set(splitQuery(title.toLowerCase()).map((word) => stemmer.stemWord(word)));
      if (!terms.every((term) => words.has(term)) || [...excludedTerms].some((term) => words.has(term))) continue;
      for (const [file, id] of found) {
        if (id === null || index.titles[file] === title) continue; // a page's own title: already a result
        sections.push([index.docnames[file], `${index.titles[file]} > ${title}`, "#" + id, null,
                       Scorer.title, index.filenames[file], SearchResultKind.title]);
      }
    }
    return [...results, ...sections.reverse(), ...pastedErrors(query, index, stemmer)];
  };

  // A pasted error message holds its own pid, path, sizes and addresses, which no page has, so Sphinx's
  // search (every word must match) finds nothing. The error index's titles are messages too: list each
  // whose words (numbers and stop words aside) are nearly all in the query, best match last (shown first).
  const ERROR_INDEX = "site/error_index";
  const isStop = (word) =>
    typeof stopwords !== "undefined" && (stopwords.has ? stopwords.has(word) : stopwords.includes(word));
  const keyWords = (text, stemmer) =>
    splitQuery(text.toLowerCase()).filter((w) => w.length > 1 && !/^[0-9a-fx]*[0-9][0-9a-fx]*$/.test(w) && !isStop(w))
      .map((w) => stemmer.stemWord(w));
  const pastedErrors = (query, index, stemmer) => {
    const pasted = new Set(keyWords(query, stemmer));
    const file = index.docnames.indexOf(ERROR_INDEX);
    if (pasted.size < 3 || file < 0) return [];
    const hits = [];
    for (const [title, found] of Object.entries(index.alltitles)) {
      const words = [...new Set(keyWords(title, stemmer))];
      const share = words.filter((w) => pasted.has(w)).length / Math.max(words.length, 1);
      if (words.length < 2 || share < 0.8) continue;
      for (const [where, id] of found) {
        if (where !== file || id === null) continue;
        hits.push([share, [ERROR_INDEX, `${index.titles[file]} > ${title}`, "#" + id, null,
                   Scorer.title + share, index.filenames[file], SearchResultKind.title]]);
      }
    }
    return hits.sort((a, b) => a[0] - b[0]).map((hit) => hit[1]);
  };
})();
