"""How the rules flag their outputs: temporary unless the embeddings are kept, or pages of
Snakemake's report (`snakemake --report`): a sample's figures and tables, and whole tables while
they are small."""

import os
import shlex

from snakemake.io import expand, report, temp


def temp_unless_kept(config: dict, path: str):
    """`path`, embeddings or the shard FASTA they come from: temporary unless
    outputs.keep_embeddings (an embed job run again must then find its shard; without, embedding a
    shard again runs prepare again too)."""
    return path if config["outputs"]["keep_embeddings"] else temp(path)


def page(path: str, caption: str, category: str, item: str, subcategory: str | None = None):
    where = {"subcategory": subcategory} if subcategory else {}
    return report(path, caption=f"../report/{caption}", category=category, labels={"item": item}, **where)


def sample_page(file: str, caption: str, category: str, item: str):
    """results/{sample}/report/`file` as a page of the sample's part of the report."""
    return page(f"results/{{sample}}/report/{file}", caption, category, item, "{sample}")


def attached_table(tables: dict[str, str], sheet: list[str], config: dict, name: str, item: str):
    """The table `tables[name]` as a report attachment, only while the `tables` of every sample of
    the `sheet` together hold at most report.max_attached_mb (embedded tables grow the HTML by 4/3
    of their size); else the report names the tables' paths."""
    found = [f for f in expand(list(tables.values()), sample=sheet) if os.path.isfile(f)]
    if sum(map(os.path.getsize, found)) > config["report"]["max_attached_mb"] * 1024**2:
        return tables[name]
    return page(tables[name], f"{name}.rst", "Predictions", item, "{sample}")


def optional_files(when: bool, *paths: str) -> list[str]:
    return list(paths) if when else []


def unwritten_files(when: bool, *paths: str):
    """params.unwritten: optional outputs that this run does not make (`when` False), as --unwritten
    PATH...: when the job runs, it removes an earlier run's, which would disagree with its tables. A
    function of the job's output, which Snakemake does not compare: the param reruns nothing."""

    def unwritten(wildcards, output) -> str:
        return "" if when else "--unwritten " + shlex.join(expand(list(paths), **wildcards))

    return unwritten
