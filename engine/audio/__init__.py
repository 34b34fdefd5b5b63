"""Audio for the speech endpoints: decoding uploads (:mod:`.decode`), cutting long audio
into windows and joining their texts (:mod:`.windows`), subtitles (:mod:`.subtitles`) and
Whisper's languages (:mod:`.languages`). No OpenVINO here: the engine worker transcribes."""
